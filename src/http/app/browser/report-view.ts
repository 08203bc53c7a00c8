/**
 * The read-only report view's script (issue 32): the Print button (hidden without script, so the
 * page offers only what works). Everything else of the view works without script.
 */
for (const button of Array.from(document.querySelectorAll<HTMLButtonElement>('button[data-print]'))) {
  button.hidden = false;
  button.addEventListener('click', () => window.print());
}
