import { describe, expect, it } from "vitest";
import { en } from "../src/i18n/en";
import { zh } from "../src/i18n/zh";
import { guessLang, MESSAGES, setLang, t } from "../src/i18n";

describe("i18n", () => {
  it("en and zh have exactly the same keys, none empty", () => {
    expect(Object.keys(zh).sort()).toEqual(Object.keys(en).sort());
    for (const lang of Object.values(MESSAGES)) for (const v of Object.values(lang)) expect(v.trim()).not.toBe("");
  });

  it("zh is really translated (most strings differ from English)", () => {
    const same = Object.keys(en).filter((k) => en[k as keyof typeof en] === zh[k as keyof typeof en]);
    expect(same.length).toBeLessThan(Object.keys(en).length / 10);
  });

  it("t() follows the chosen language", () => {
    setLang("zh");
    expect(t("search")).toBe(zh.search);
    setLang("en");
    expect(t("search")).toBe("Search");
    expect(guessLang(["zh-CN", "en"])).toBe("zh");
    expect(guessLang(["en-US"])).toBe("en");
  });
});
