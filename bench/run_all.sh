#!/usr/bin/env bash
# Runs every benchmark, each side by side with the reference (installed by ../shared/peers/setup.sh when present).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export PEERS_DIR=${PEERS_DIR:-/tmp/peers}
[ -f ../shared/peers/setup.sh ] && bash ../shared/peers/setup.sh >/dev/null
bash scripts/hf_deps.sh >/dev/null || echo "scripts/hf_deps.sh failed: the small-hf-* cases will be skipped"
status=0
for b in parse_dump collector_overhead collector_breakdown collector_ceiling writer_files graph_compare plugin_bench monitor_overhead; do
  [ -f "bench/$b.py" ] || continue
  echo "== bench/$b.py"
  "$PY" "bench/$b.py" "$@" || status=1
done
exit $status
