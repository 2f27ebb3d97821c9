#!/usr/bin/env bash
# The first hour of a newcomer: clone this checkout into a temporary folder and time the README's two
# commands from nothing (no .venv, an empty cache), each step on its own line.
#
#   bash bench/first_run.sh                 # make demo, then make test
#   bash bench/first_run.sh demo            # only make demo
#   KEEP=1 bash bench/first_run.sh          # keep the clone (its path is printed)
#
# Writes bench/manual/first_run.md (a section of BENCHMARKS.md, "measured by hand") and leaves the
# full logs next to the clone. Run it when the machine is otherwise quiet: it measures wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TARGETS=${*:-demo test}
WORK=$(mktemp -d /tmp/first-run-XXXXXX)
git clone --quiet "$ROOT" "$WORK/clone"
export XDG_CACHE_HOME="$WORK/cache" RLFACTORY_NB_CACHE="$WORK/cache/rlfactory_nb"
mkdir -p "$XDG_CACHE_HOME"
RESULT="$ROOT/bench/manual/first_run.md"
ROWS=()

timed() {  # timed LABEL COMMAND...: run in the clone, log to $WORK/LABEL.log, remember the seconds
    local label=$1; shift
    local started=$SECONDS
    echo "== $label: $*" >&2
    if (cd "$WORK/clone" && "$@") >"$WORK/$label.log" 2>&1; then status=ok; else status="failed (see $WORK/$label.log)"; fi
    ROWS+=("| $label | $((SECONDS - started)) s | $status |")
    echo "   $label: $((SECONDS - started)) s, $status" >&2
}

for target in $TARGETS; do
    case $target in
        demo)
            timed "make install" make install     # the demo's own install step, timed apart
            timed "make demo (installed)" make demo RUN_DIR=runs/first-run
            grep -E "^running |  done in |saved with" "$WORK/make demo (installed).log" >&2 || true
            ;;
        test)
            timed "make test" make test
            ;;
        *) echo "unknown target $target (demo, test)" >&2; exit 2 ;;
    esac
done

{
    echo "## The first hour: \`make demo\` and \`make test\` on a fresh clone"
    echo
    echo "    bash bench/first_run.sh $TARGETS"
    echo
    echo "Machine: $(nproc) CPU cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM, $(date -u +%Y-%m-%d), load average at end $(cut -d' ' -f1-3 /proc/loadavg). A clone of commit $(git -C "$WORK/clone" rev-parse --short HEAD), no .venv, empty caches (XDG_CACHE_HOME: pip downloads every wheel again)."
    echo
    echo "| command | wall time | result |"
    echo "|---|---:|---|"
    printf '%s\n' "${ROWS[@]}"
    if [ -f "$WORK/make demo (installed).log" ]; then
        echo
        echo "\`make demo\` from nothing is the two rows above it; its notebooks (the runner's own lines):"
        echo
        grep -E "^running |  done in " "$WORK/make demo (installed).log" | sed 's/^/    /' || true
    fi
    if [ -f "$WORK/make test.log" ]; then
        echo
        echo "\`make test\`'s closing lines:"
        echo
        grep -E "passed|failed" "$WORK/make test.log" | tail -2 | sed 's/^/    /' || true
    fi
} >"$RESULT"
cat "$RESULT"
echo "logs in $WORK" >&2
[ -n "${KEEP:-}" ] || rm -rf "$WORK/clone" "$WORK/cache"
