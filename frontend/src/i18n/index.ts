// t("key") in the current language. Only strings here; numbers and node names are never translated.
import { en, type MessageKey } from "./en";
import { zh } from "./zh";
import type { Lang } from "../state/state";

export const MESSAGES: Record<Lang, Record<MessageKey, string>> = { en, zh };

let current: Lang = "en";

export function setLang(lang: Lang): void {
  current = lang;
}

export function getLang(): Lang {
  return current;
}

export function t(key: MessageKey): string {
  return MESSAGES[current][key] ?? en[key];
}

/** The browser's preferred language, for the first visit. */
export function guessLang(languages: readonly string[]): Lang {
  return languages.some((l) => l.toLowerCase().startsWith("zh")) ? "zh" : "en";
}

export type { MessageKey };
