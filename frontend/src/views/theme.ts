// Dark mode: inside TensorBoard its own setting wins (it already folds in the system preference and the user's
// override, as body.dark-mode on the TensorBoard page); on its own, the page follows the system.

export function followDarkMode(parent: Window | null, apply: (dark: boolean) => void): void {
  const media = window.matchMedia?.("(prefers-color-scheme: dark)");
  const body = parent?.document.body ?? null;
  const update = () => apply(body ? body.classList.contains("dark-mode") : !!media?.matches);
  media?.addEventListener?.("change", update);
  if (body) new MutationObserver(update).observe(body, { attributes: true, attributeFilter: ["class"] });
  update();
}
