#!/usr/bin/env bash
# Builds the sim engine image locally (no registry needed): a rootfs made from this
# machine's Python and the project package (docker/make_rootfs.py), loaded with
# `docker import`. Rebuilt only when the package sources or this recipe change.
# Usage: bash docker/build-sim-image.sh [IMAGE]   (default pytest-llmslo/sim:local)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="${1:-pytest-llmslo/sim:local}"
# The interpreter whose installation goes into the image: the project's venv when there
# is one (CI's, then a developer's: they have numpy and httpx), else the one on PATH.
PY="${LLMSLO_IMAGE_PYTHON:-}"
if [[ -z "$PY" ]]; then
  PY="python3"
  for v in "${LLMSLO_CI_VENV:-.venv-ci}" .venv; do
    [[ "$v" = /* ]] || v="$ROOT/$v"
    if [[ -x "$v/bin/python" ]]; then PY="$v/bin/python"; break; fi
  done
fi

hash="$(
  cd "$ROOT"
  {
    "$PY" -c 'import sys; print(sys.version, sys.executable)'
    find pytest_llmslo -name '*.py' -print0 | sort -z | xargs -0 sha256sum
    sha256sum docker/make_rootfs.py docker/build-sim-image.sh
  } | sha256sum | cut -c1-16
)"
current="$(docker image inspect -f '{{ index .Config.Labels "io.llmslo.source-hash" }}' "$IMAGE" 2>/dev/null || true)"
if [[ "$current" == "$hash" ]]; then
  echo "sim image $IMAGE is up to date ($hash)"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PY" "$ROOT/docker/make_rootfs.py" "$tmp/rootfs.tar" --package-dir "$ROOT/pytest_llmslo"
docker import \
  --change 'ENV PATH=/usr/bin:/bin' \
  --change 'ENV PYTHONPATH=/opt/llmslo/site' \
  --change 'ENV PYTHONUNBUFFERED=1' \
  --change 'WORKDIR /tmp' \
  --change "LABEL io.llmslo.source-hash=$hash" \
  --change 'CMD ["python3", "-m", "pytest_llmslo.sim", "--host", "127.0.0.1", "--port", "8000"]' \
  "$tmp/rootfs.tar" "$IMAGE" >/dev/null
# The smallest check that the interpreter and the package load inside the image.
docker run --rm --network none "$IMAGE" python3 -c 'import pytest_llmslo.sim.server' \
  || { echo "sim image $IMAGE does not run python" >&2; exit 1; }
docker image prune -f --filter "label=io.llmslo.source-hash" >/dev/null 2>&1 || true
echo "sim image $IMAGE built ($hash)"
