/**
 * The report editor's inline script (issue 5): live enableWhen (hide and disable items whose
 * conditions fail), "add another" for repeating questions and groups, the browser's UTC offset for
 * dateTime answers, and focus on the error summary. The page works without it (no live
 * enableWhen, no extra rows).
 */
import { ENABLE_WHEN_SOURCE } from './enable-when.js';

export const EDITOR_SCRIPT = `(function () {
${ENABLE_WHEN_SOURCE}
  var form = document.getElementById('report-form');
  var dataEl = document.getElementById('cb-data');
  if (!form || !dataEl) return;
  var data = JSON.parse(dataEl.textContent || '{}');
  function own(o, k) { return Object.prototype.hasOwnProperty.call(o, k); }
  var tz = form.querySelector('input[name="cb:tz"]');
  if (tz) {
    var off = -new Date().getTimezoneOffset();
    var sign = off >= 0 ? '+' : '-';
    var abs = Math.abs(off);
    tz.value = sign + String(Math.floor(abs / 60)).padStart(2, '0') + ':' + String(abs % 60).padStart(2, '0');
  }
  function normalise(id, raw) {
    var choices = own(data.choices, id) ? data.choices[id] : undefined;
    if (choices) return own(choices, raw) ? choices[raw] : undefined;
    var type = own(data.types, id) ? data.types[id] : undefined;
    if (type === 'boolean') return raw === 'true' ? true : raw === 'false' ? false : undefined;
    if (type === 'integer' || type === 'decimal') { var n = Number(raw); return isNaN(n) ? undefined : n; }
    return raw;
  }
  function collect() {
    var values = Object.create(null);
    Array.prototype.forEach.call(form.elements, function (el) {
      if (!el.name || el.name.indexOf('q:') !== 0 || el.disabled) return;
      if ((el.type === 'radio' || el.type === 'checkbox') && !el.checked) return;
      var raw = (el.value || '').trim();
      if (!raw) return;
      var id = el.name.slice(2);
      var v = normalise(id, raw);
      if (v === undefined) return;
      (values[id] = values[id] || []).push(v);
    });
    return values;
  }
  function apply() {
    var enabled = cbEnabled(data.rules, collect());
    var changed = false;
    Array.prototype.forEach.call(form.querySelectorAll('[data-linkid]'), function (wrapper) {
      var on = enabled[wrapper.getAttribute('data-linkid')] !== false;
      if (wrapper.hidden === !on) return;
      wrapper.hidden = !on;
      changed = true;
    });
    Array.prototype.forEach.call(form.elements, function (el) {
      if (!el.name || (el.name.indexOf('q:') !== 0 && el.name.indexOf('n:') !== 0)) return;
      var off = !!el.closest('[hidden]');
      if (el.disabled !== off) { el.disabled = off; changed = true; }
    });
    return changed;
  }
  function settle() { for (var i = 0; i < 10 && apply(); i++) {} }
  form.addEventListener('input', settle);
  form.addEventListener('change', settle);
  var counter = 0;
  function fresh(root) {
    Array.prototype.forEach.call(root.querySelectorAll('input, textarea, select'), function (el) {
      if (el.type === 'hidden') return;
      if (el.type === 'radio' || el.type === 'checkbox') el.checked = false;
      else if (el.tagName === 'SELECT') el.selectedIndex = 0;
      else el.value = '';
    });
    Array.prototype.forEach.call(root.querySelectorAll('[id]'), function (el) {
      var old = el.id; var next = old + '-n' + (++counter);
      el.id = next;
      var label = root.querySelector('label[for="' + old + '"]');
      if (label) label.htmlFor = next;
      if (el.getAttribute('aria-describedby')) { el.removeAttribute('aria-describedby'); el.removeAttribute('aria-invalid'); }
    });
    Array.prototype.forEach.call(root.querySelectorAll('.field-error'), function (e) { e.remove(); });
  }
  form.addEventListener('click', function (event) {
    var button = event.target.closest('button[data-add-answer], button[data-add-group]');
    if (!button) return;
    event.preventDefault();
    var wrapper = button.closest('[data-linkid]');
    var list = wrapper.querySelector(button.hasAttribute('data-add-answer') ? '.repeats' : '.instances');
    var rows = list.children;
    var clone = rows[rows.length - 1].cloneNode(true);
    fresh(clone);
    if (button.hasAttribute('data-add-answer') && !clone.querySelector('label')) {
      var input = clone.querySelector('input, textarea');
      var label = document.createElement('label');
      label.className = 'visually-hidden';
      label.htmlFor = input.id;
      label.textContent = (wrapper.querySelector('.q-label') || {}).textContent + ' (' + (rows.length + 1) + ')';
      clone.insertBefore(label, input);
    }
    list.appendChild(clone);
    settle();
    var first = clone.querySelector('input:not([type=hidden]), textarea, select');
    if (first) first.focus();
  });
  settle();
  var summary = document.getElementById('error-summary');
  if (summary) summary.focus();
})();`;
