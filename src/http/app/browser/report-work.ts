/**
 * Never losing a clinician's typed work (issue 32 "Work is never lost or silently overwritten"):
 *
 * - **Autosave**: a form with unsaved changes is saved {@link AUTOSAVE_DELAY_MS} after the last
 *   change (the focus may stay in the field) and when the page is hidden (`visibilitychange`,
 *   `fetch` with `keepalive`), as the Save button's POST with `Accept: application/json`
 *   (docs/interface.md §4.2 "Report editor saves": 200 `{version, savedAt}`, 409
 *   `{conflict, currentVersion, conflictUrl}`, 401 when the session ended). An answer that is not
 *   JSON (a server before that contract: the 303 to the editor page) counts as saved when it is
 *   2xx. The status region says "Saved 10:42", "Saving…" or "Not saved".
 * - **Draft**: every change is kept in `sessionStorage` under the Task and the version the page
 *   was based on; when the report opens and a draft differs from what the server has, it is
 *   offered back ("Restore unsaved answers" / "Discard"). It survives reloads, Back, a session
 *   ended mid-edit and a new handover in the same window or frame; it goes with the tab.
 * - **Leaving**: `beforeunload` asks while changes are unsaved; Cancel asks in a dialog before
 *   discarding them.
 * - **Submit once**: the first Submit disables the report's buttons and says "Submitting…".
 */

/** Milliseconds after the last change before an autosave. */
export const AUTOSAVE_DELAY_MS = 3000;

const DRAFT_PREFIX = 'casebook:draft:';

/** A control of the form as the draft keeps it: name, value, and for radios and checkboxes whether checked. */
type SavedControl = readonly [name: string, value: string, checked?: boolean];

/** What sessionStorage holds for a Task. */
export interface Draft {
  readonly taskId: string;
  /** The QuestionnaireResponse version the page was based on ('' when the page names none). */
  readonly baseVersion: string;
  /** When the draft was written (ISO, the browser's clock). */
  readonly at: string;
  /** Instances of repeating groups and answers, by wrapper key. */
  readonly counts: Record<string, number>;
  readonly controls: readonly SavedControl[];
}

/** The hooks of the editor this module needs (src/http/app/browser/editor.ts). */
export interface EditorHooks {
  /** Adds an instance (group) or answer row to the wrapper with `key`; true when one was added. */
  readonly add: (key: string) => boolean;
  /** Removes the last instance or row of the wrapper with `key`; true when one was removed. */
  readonly removeLast: (key: string) => boolean;
  /** Asks the engine to run again (after fields were set by script). */
  readonly changed: () => void;
}

const FIELD = /^(?:q|n|u):/;

type Control = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;
const isControl = (el: Element): el is Control =>
  el instanceof HTMLInputElement || el instanceof HTMLSelectElement || el instanceof HTMLTextAreaElement;

/** The answer fields of the form, in page order. */
const answerControls = (form: HTMLFormElement): Control[] =>
  [...form.elements].filter(isControl).filter((el) => FIELD.test(el.name));

const isToggle = (el: Control): el is HTMLInputElement =>
  el instanceof HTMLInputElement && (el.type === 'radio' || el.type === 'checkbox');

/** How many instances or rows each repeating wrapper has. */
const countsOf = (form: HTMLFormElement): Record<string, number> => {
  const counts: Record<string, number> = {};
  for (const list of form.querySelectorAll<HTMLElement>('.instances, .repeats')) {
    const key = list.closest<HTMLElement>('[data-key]')?.dataset.key;
    if (key !== undefined) counts[key] = list.children.length;
  }
  return counts;
};

/** The form's answers as a draft keeps them. */
export const snapshot = (
  form: HTMLFormElement,
): { counts: Record<string, number>; controls: SavedControl[] } => ({
  counts: countsOf(form),
  controls: answerControls(form).map(
    (el): SavedControl => (isToggle(el) ? [el.name, el.value, el.checked] : [el.name, el.value]),
  ),
});

const sameAnswers = (a: Pick<Draft, 'counts' | 'controls'>, b: Pick<Draft, 'counts' | 'controls'>) =>
  JSON.stringify([a.counts, a.controls]) === JSON.stringify([b.counts, b.controls]);

/**
 * Writes a draft back into the form: repeat instances and rows are added or removed until they
 * match, then each field takes the value at its position among the fields of its name.
 */
export const restore = (
  form: HTMLFormElement,
  draft: Pick<Draft, 'counts' | 'controls'>,
  hooks: EditorHooks,
): void => {
  // Nested repeats appear once their parents exist: a few passes reach every level.
  for (let pass = 0; pass < 5; pass++) {
    let moved = false;
    const now = countsOf(form);
    for (const [key, want] of Object.entries(draft.counts)) {
      let have = now[key];
      if (have === undefined) continue;
      while (have < want && hooks.add(key)) {
        have++;
        moved = true;
      }
      while (have > want && want > 0 && hooks.removeLast(key)) {
        have--;
        moved = true;
      }
    }
    if (!moved) break;
  }
  const byName = new Map<string, SavedControl[]>();
  for (const c of draft.controls) byName.set(c[0], [...(byName.get(c[0]) ?? []), c]);
  const seen = new Map<string, number>();
  for (const el of answerControls(form)) {
    const saved = byName.get(el.name) ?? [];
    if (isToggle(el)) {
      el.checked = saved.some((c) => c[1] === el.value && c[2] === true);
      continue;
    }
    // Position among the fields of this name that are not radios or checkboxes.
    const plain = saved.filter((c) => c[2] === undefined);
    const at = seen.get(el.name) ?? 0;
    seen.set(el.name, at + 1);
    const value = plain[at]?.[1];
    if (value !== undefined) el.value = value;
  }
  hooks.changed();
};

const draftKey = (taskId: string, baseVersion: string) => `${DRAFT_PREFIX}${taskId}:${baseVersion}`;

/** The drafts of a Task kept in this tab, newest first. */
const draftsOf = (taskId: string): { key: string; draft: Draft }[] => {
  const found: { key: string; draft: Draft }[] = [];
  try {
    for (let i = 0; i < sessionStorage.length; i++) {
      const key = sessionStorage.key(i);
      if (!key?.startsWith(`${DRAFT_PREFIX}${taskId}:`)) continue;
      const draft = JSON.parse(sessionStorage.getItem(key) ?? 'null') as Draft | null;
      if (draft && Array.isArray(draft.controls)) found.push({ key, draft });
    }
  } catch {
    // Storage disabled or a foreign entry: no drafts.
  }
  return found.sort((a, b) => b.draft.at.localeCompare(a.draft.at));
};

const forget = (taskId: string): void => {
  try {
    for (const { key } of draftsOf(taskId)) sessionStorage.removeItem(key);
  } catch {
    // Storage disabled: nothing was kept.
  }
};

/** "10:42" in the browser's time zone. */
const clockTime = (iso: string | undefined): string => {
  const date = iso ? new Date(iso) : new Date();
  return (Number.isNaN(date.getTime()) ? new Date() : date).toLocaleTimeString([], {
    hour: '2-digit',
    minute: '2-digit',
  });
};

/** What a save POST answered. */
type SaveOutcome =
  | { kind: 'saved'; version?: string; savedAt?: string }
  | { kind: 'conflict'; conflictUrl?: string }
  | { kind: 'session-ended' }
  | { kind: 'refused'; status: number }
  | { kind: 'offline' };

/** Reads the answer of a save POST (JSON contract, or the editor page a 303 led to). */
const outcomeOf = async (res: Response): Promise<SaveOutcome> => {
  if (res.status === 401) return { kind: 'session-ended' };
  const type = res.headers.get('Content-Type') ?? '';
  let body: Record<string, unknown> | undefined;
  if (/json/.test(type))
    body = (await res.json().catch(() => undefined)) as Record<string, unknown> | undefined;
  if (res.status === 409)
    return {
      kind: 'conflict',
      ...(typeof body?.conflictUrl === 'string' ? { conflictUrl: body.conflictUrl } : {}),
    };
  if (!res.ok) return { kind: 'refused', status: res.status };
  if (body)
    return {
      kind: 'saved',
      ...(typeof body.version === 'string' ? { version: body.version } : {}),
      ...(typeof body.savedAt === 'string' ? { savedAt: body.savedAt } : {}),
    };
  // A server before the JSON answer: the editor page after its 303, with the new base version.
  const html = /html/.test(type) ? await res.text().catch(() => '') : '';
  const version = /name="base_version" value="([^"]*)"/.exec(html)?.[1];
  return { kind: 'saved', ...(version ? { version } : {}) };
};

/**
 * Starts autosave, drafts, the leaving guards and submit-once on the report form.
 * `data-task` on the form names the Task; `input[name=base_version]` (optional) the version.
 */
export const startReportWork = (form: HTMLFormElement, hooks: EditorHooks): void => {
  const taskId = form.dataset.task ?? '';
  // An amendment's draft lives in the page until it is submitted (src/http/app/editor.ts): no autosave.
  const autosave = form.dataset.autosave !== 'off';
  // Not the form's action property: the buttons named "action" shadow it.
  const actionUrl = new URL(form.getAttribute('action') ?? '', window.location.href).toString();
  const status = document.getElementById('cb-save-status');
  const base = () => form.querySelector<HTMLInputElement>('input[name="base_version"]');
  const baseVersion = () => base()?.value ?? '';
  /**
   * The page holds answers the server did not store (`data-unsaved`: a refused submit, a
   * conflict, a merge; src/http/app/editor.ts): they count as unsaved from the start.
   */
  const unsavedOnArrival = form.hasAttribute('data-unsaved');
  /** The answers as the server has them (the page as served, then each save). */
  let stored: Pick<Draft, 'counts' | 'controls'> = unsavedOnArrival
    ? { counts: {}, controls: [] }
    : snapshot(form);
  let submitting = false;
  let leaving = false;
  /** Set while the form posts a save without script (the page then shows the server's answer). */
  let nativeSave = false;
  const postNatively = () => {
    leaving = true;
    nativeSave = true;
    const button = form.querySelector<HTMLButtonElement>('button[name="action"][value="save"]');
    if (button) form.requestSubmit(button);
    else form.submit();
  };
  let timer: number | undefined;
  let inFlight: Promise<SaveOutcome> | undefined;
  let again = false;

  const say = (text: string, state: string) => {
    if (!status) return;
    status.textContent = text;
    status.dataset.state = state;
  };
  const savedAt = status?.dataset.savedAt;
  if (savedAt) say(`Saved ${clockTime(savedAt)}`, 'saved');
  if (unsavedOnArrival) say('Not saved yet', 'pending');

  const dirty = () => !sameAnswers(snapshot(form), stored);

  const keepDraft = () => {
    if (!taskId) return;
    const now = snapshot(form);
    try {
      if (sameAnswers(now, stored)) sessionStorage.removeItem(draftKey(taskId, baseVersion()));
      else
        sessionStorage.setItem(
          draftKey(taskId, baseVersion()),
          JSON.stringify({
            taskId,
            baseVersion: baseVersion(),
            at: new Date().toISOString(),
            ...now,
          } satisfies Draft),
        );
    } catch {
      // Storage full or disabled: autosave still runs.
    }
  };

  /** The form's fields as the Save button posts them. */
  const body = (): URLSearchParams => {
    const params = new URLSearchParams();
    for (const [name, value] of new FormData(form)) if (typeof value === 'string') params.append(name, value);
    params.set('action', 'save');
    return params;
  };

  /** POSTs the form as a save; `keepalive` when the page is going away. */
  const post = async (keepalive: boolean): Promise<SaveOutcome> => {
    try {
      const res = await fetch(actionUrl, {
        method: 'POST',
        headers: { Accept: 'application/json', 'Content-Type': 'application/x-www-form-urlencoded' },
        body: body(),
        credentials: 'same-origin',
        keepalive,
      });
      return await outcomeOf(res);
    } catch {
      return { kind: 'offline' };
    }
  };

  const sessionEnded = () => {
    say('Not saved', 'failed');
    const note = document.getElementById('cb-save-problem');
    if (note) {
      note.hidden = false;
      note.textContent =
        'Not saved: your session has ended. Your answers are kept in this browser and will be offered back when you open this report again from your clinical system.';
    }
  };

  /**
   * Saves now; answers whether the page's answers are stored. `always` (the Save button) posts even
   * when the answers are unchanged: the stored response may hold what the page does not show (answers
   * of disabled items), which the server drops when it saves.
   */
  const save = async (keepalive = false, always = false): Promise<SaveOutcome | undefined> => {
    if (timer !== undefined) window.clearTimeout(timer);
    timer = undefined;
    if (submitting || (!always && !dirty())) return undefined;
    if (inFlight && !always) {
      again = true;
      await inFlight;
      return undefined;
    }
    // The Save button waits for an autosave under way, then posts what the page holds now.
    while (inFlight) await inFlight;
    if (submitting) return undefined;
    const sent = snapshot(form);
    const sentBase = baseVersion();
    say('Saving…', 'saving');
    form.dataset.autosave = 'saving';
    inFlight = (async (): Promise<SaveOutcome> => {
      const outcome = await post(keepalive);
      if (outcome.kind === 'saved') {
        stored = sent;
        const input = base();
        if (input && outcome.version) input.value = outcome.version;
        try {
          sessionStorage.removeItem(draftKey(taskId, sentBase));
        } catch {
          // Storage disabled.
        }
        keepDraft();
        say(`Saved ${clockTime(outcome.savedAt)}`, 'saved');
        const note = document.getElementById('cb-save-problem');
        if (note) note.hidden = true;
      } else if (outcome.kind === 'conflict') {
        say('Not saved', 'failed');
        const url = outcome.conflictUrl;
        const note = document.getElementById('cb-save-problem');
        if (note) {
          note.hidden = false;
          note.textContent = 'Not saved: this report was changed elsewhere since you opened it. ';
          if (url) {
            const a = document.createElement('a');
            a.href = url;
            a.textContent = 'See what changed and keep your answers';
            note.appendChild(a);
          }
        }
        // The form posted without script answers the conflict page with these answers and what
        // changed, and offers the merge (the GET of conflictUrl cannot show them): post it so.
        if (url) postNatively();
      } else if (outcome.kind === 'session-ended') sessionEnded();
      else say('Not saved', 'failed');
      return outcome;
    })();
    const outcome = await inFlight;
    inFlight = undefined;
    form.dataset.autosave = outcome.kind === 'saved' ? 'saved' : 'failed';
    if (again) {
      again = false;
      schedule();
    }
    return outcome;
  };

  const schedule = () => {
    if (timer !== undefined) window.clearTimeout(timer);
    if (submitting) return;
    timer = window.setTimeout(() => void save(), AUTOSAVE_DELAY_MS);
  };

  const onChange = () => {
    keepDraft();
    if (dirty() && autosave) {
      form.dataset.autosave = 'pending';
      say('Not saved yet', 'pending');
      schedule();
    }
  };
  form.addEventListener('input', onChange);
  form.addEventListener('change', onChange);
  // Adding or removing an instance changes the answers too.
  form.addEventListener('cb:structure', onChange);

  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'hidden' && dirty() && autosave) {
      keepDraft();
      void save(true);
    }
  });
  window.addEventListener('beforeunload', (event) => {
    keepDraft();
    if (leaving || submitting || !dirty()) return;
    event.preventDefault();
    // Older browsers show the dialog only with a returnValue.
    event.returnValue = '';
  });
  window.addEventListener('pageshow', (event) => {
    // Back to a page kept in memory after Submit: the buttons work again.
    if (event.persisted) unlock();
  });

  const buttons = () => [...form.querySelectorAll<HTMLButtonElement>('button[name="action"]')];
  const submitButton = () => form.querySelector<HTMLButtonElement>('button[name="action"][value="submit"]');
  const unlock = () => {
    submitting = false;
    leaving = false;
    form.querySelector('input[data-submitting]')?.remove();
    for (const b of buttons()) b.disabled = false;
    const button = submitButton();
    if (button?.dataset.label) button.textContent = button.dataset.label;
  };

  // In a frame (same-site embedding, docs/architecture.md "Embedding"), the EHR's post-cancel and
  // post-submit pages open in the top window, not inside the frame. A Submit the engine expects
  // to be refused stays in the frame, where the refusal is shown.
  const framed = window.top !== window.self;
  form.addEventListener(
    'click',
    (event) => {
      const button = (event.target as Element | null)?.closest<HTMLButtonElement>('button[name="action"]');
      if (!button || !framed) return;
      const top =
        (button.value === 'cancel' && form.hasAttribute('data-return-cancel')) ||
        (button.value === 'submit' &&
          form.hasAttribute('data-return-submit') &&
          form.dataset.problems === '0');
      if (top) button.formTarget = '_top';
      else button.removeAttribute('formtarget');
    },
    true,
  );

  /** Submits the form with `action` as if its button was pressed. */
  const submitWith = (action: string) => {
    const button = form.querySelector<HTMLButtonElement>(`button[name="action"][value="${action}"]`);
    if (button) form.requestSubmit(button);
  };

  const dialog = document.getElementById('cb-discard') as HTMLDialogElement | null;
  let cancelConfirmed = false;

  form.addEventListener('submit', (event) => {
    const submitter = event.submitter as HTMLButtonElement | null;
    const action = submitter?.value;
    if (submitting) {
      event.preventDefault();
      return;
    }
    if (action === 'cancel') {
      if (dirty() && !cancelConfirmed && dialog && typeof dialog.showModal === 'function') {
        event.preventDefault();
        dialog.returnValue = '';
        dialog.showModal();
        return;
      }
      cancelConfirmed = false;
      forget(taskId);
      leaving = true;
      return;
    }
    if (action === 'save') {
      if (nativeSave) return;
      // Saved by script: a session that ended keeps the page and its answers (not a 401 page).
      event.preventDefault();
      void save(false, true).then((outcome) => {
        if (outcome === undefined || outcome.kind === 'saved') {
          leaving = true;
          const url = new URL(actionUrl);
          url.searchParams.set('saved', '1');
          window.location.assign(url.toString());
        } else if (outcome.kind === 'refused') {
          // The server has something to show (e.g. a report that cannot be saved as it is).
          postNatively();
        }
      });
      return;
    }
    if (action === 'merge') {
      // The conflict page's merge posts the answers again: nothing is left behind.
      leaving = true;
      return;
    }
    if (action === 'submit') {
      keepDraft();
      submitting = true;
      leaving = true;
      if (timer !== undefined) window.clearTimeout(timer);
      // A disabled submitter is not posted: the action travels in a hidden field.
      const hidden = document.createElement('input');
      hidden.type = 'hidden';
      hidden.name = 'action';
      hidden.value = 'submit';
      hidden.dataset.submitting = '';
      form.appendChild(hidden);
      const button = submitButton();
      if (button) {
        button.dataset.label = button.textContent ?? '';
        button.textContent = 'Submitting…';
      }
      // After the browser built the request from the form (a disabled button is left out).
      window.setTimeout(() => {
        for (const b of buttons()) b.disabled = true;
      }, 0);
    }
  });

  dialog?.addEventListener('close', () => {
    if (dialog.returnValue === 'discard') {
      cancelConfirmed = true;
      submitWith('cancel');
    } else form.querySelector<HTMLButtonElement>('button[name="action"][value="cancel"]')?.focus();
  });

  if (unsavedOnArrival) {
    // The page holds what the user just posted: it supersedes older drafts and is kept as the draft.
    forget(taskId);
    keepDraft();
  } else
    offerDraft(form, taskId, stored, hooks, () => {
      onChange();
    });
};

/** Offers the newest draft of the Task back when it differs from the page's answers. */
const offerDraft = (
  form: HTMLFormElement,
  taskId: string,
  stored: Pick<Draft, 'counts' | 'controls'>,
  hooks: EditorHooks,
  restored: () => void,
): void => {
  const region = document.getElementById('cb-draft');
  const newest = draftsOf(taskId)[0];
  if (!region || !newest) return;
  if (sameAnswers(newest.draft, stored)) {
    forget(taskId);
    return;
  }
  const text = region.querySelector('[data-draft-text]');
  if (text)
    text.textContent = `Answers you typed on ${new Date(newest.draft.at).toLocaleString([], {
      dateStyle: 'medium',
      timeStyle: 'short',
    })} were not saved. They are kept in this browser.`;
  region.hidden = false;
  const restoreButton = region.querySelector<HTMLButtonElement>('[data-draft-restore]');
  const discardButton = region.querySelector<HTMLButtonElement>('[data-draft-discard]');
  restoreButton?.addEventListener('click', () => {
    restore(form, newest.draft, hooks);
    // Saved against the version it was typed on: a report changed since then answers 409 and the
    // conflict page, never a silent overwrite.
    const base = form.querySelector<HTMLInputElement>('input[name="base_version"]');
    if (base && newest.draft.baseVersion) base.value = newest.draft.baseVersion;
    region.hidden = true;
    form.dataset.draft = 'restored';
    restored();
    answerControls(form)
      .find((el) => !(el instanceof HTMLInputElement && el.type === 'hidden'))
      ?.focus();
  });
  discardButton?.addEventListener('click', () => {
    forget(taskId);
    region.hidden = true;
    form.dataset.draft = 'discarded';
    answerControls(form)
      .find((el) => !(el instanceof HTMLInputElement && el.type === 'hidden'))
      ?.focus();
  });
  form.dataset.draft = 'offered';
};
