#!/usr/bin/env bash
# Installs a pinned HuggingFace transformers into .deps/hf (or $TBPROBE_HF_PATH) for examples/train_hf.py,
# the tests that compare both tools on it and bench/collector_overhead.py's "small-hf-*" cases. tbprobe does not
# depend on transformers, so it stays out of the venv: both tbprobe's and msprobe's interpreters put this folder on
# sys.path. --no-deps, so that neither interpreter's numpy or torch is shadowed; the list is transformers' and
# huggingface_hub's run-time dependencies, and accelerate, which transformers' Trainer needs (psutil, its one other
# dependency, comes with tbprobe's test extras).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${TBPROBE_HF_PATH:-.deps/hf}
PIP=${PIP:-.venv/bin/pip}
PKGS="transformers==4.57.1 accelerate==1.15.0 tokenizers==0.22.1 huggingface_hub==0.36.0 safetensors==0.8.0
  regex==2026.11.19 requests==2.34.2 charset_normalizer==3.5.3 idna==3.20 urllib3==2.8.0 certifi==2026.10.19.post1
  pyyaml==6.0.4 tqdm==4.70.1 filelock==4.3.1 packaging==26.4 fsspec==2026.9.0 typing_extensions==4.16.0"
# the marker holds the list it was made from: a half-finished install, or one of another list, is redone
if [ "$(cat "$TARGET/.complete" 2>/dev/null)" = "$PKGS" ]; then
  exit 0
fi
rm -rf "$TARGET"
mkdir -p "$TARGET"
# shellcheck disable=SC2086
"$PIP" install -q --disable-pip-version-check --no-deps --target "$TARGET" $PKGS
printf '%s' "$PKGS" > "$TARGET/.complete"
echo "transformers $(ls "$TARGET" | sed -n 's/^transformers-\(.*\)\.dist-info$/\1/p') installed under $TARGET"
