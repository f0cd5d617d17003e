#!/bin/bash
# The smoke test inside the emulated Raspberry Pi: smoke.sh CPU_MODEL (cortex-a72 | cortex-a76).
# scripts/test-arm64 runs it in the arm64 Debian chroot under QEMU_CPU=CPU_MODEL, with a Pi's
# /proc/cpuinfo and a loopback-only network. Everything runs through the installed venv, as on
# a device: pip check, the commands start (dartfl, flower-supernode), the numbers
# (tests/arm64/numerics.py), then a real Mosquitto, a real agent (`dartfl edge run`) and a
# real requester (`dartfl edge replay`) talking MQTT on 127.0.0.1.
set -euo pipefail
cpu=${1:?usage: smoke.sh CPU_MODEL}
here=$(cd "$(dirname "$0")" && pwd)
venv=/opt/dartfl/venv
export PATH="$venv/bin:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/tmp PYTHONUNBUFFERED=1
export MPLCONFIGDIR=/tmp/matplotlib DARTFL_STORE=/tmp/runs.sqlite
# One thread per math library, as deployment caps them (docs/deployment.md).
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
BROKER=mqtt://127.0.0.1:1883
DEVICE=pi-smoke
TASKS=digits,uci-digits  # two tasks keep the emulated run short
REPLAY_S=20
REPLAY_RATE=4  # requests/s: every one must be answered, emulated or not

fail() { echo "FAIL ($cpu): $*" >&2; exit 1; }
# Why a command exited: a signal number above 128 names the crash (SIGILL: an instruction this
# CPU model does not have, as the CUDA torch build on a Cortex-A72).
why() {
  case "$1" in
    132) echo "killed by SIGILL (an instruction a $cpu lacks)" ;;
    134) echo "aborted (SIGABRT)" ;;
    139) echo "crashed (SIGSEGV)" ;;
    *) echo "exit code $1" ;;
  esac
}
step_start=0
begin() { echo "$1 ..."; step_start=$(date +%s%N); }
done_() {
  local tenths=$((($(date +%s%N) - step_start) / 100000000))
  echo "$1: ok ($((tenths / 10)).$((tenths % 10)) s)"
}

# pip on the device itself, with the device's marker values, finds the set scripts/cross_pip.py
# chose consistent: every requirement met, nothing installed without its dependencies.
begin "pip check (the cross-installed set, judged by the device's own pip)"
if ! python -m pip check >/tmp/pip-check.txt 2>&1; then
  fail "pip check: $(head -n 5 /tmp/pip-check.txt | tr '\n' ';')"
fi
done_ "pip check"

begin "dartfl --help"
dartfl --help >/dev/null || fail "the installed dartfl command does not start: $(why $?)"
done_ "dartfl --help"

# The device's second service: Flower's SuperNode loads grpcio, cryptography and protobuf,
# native code that must run on this CPU too.
begin "flower-supernode --help"
flower-supernode --help >/tmp/supernode.txt 2>&1 \
  || fail "flower-supernode does not start ($(why $?)): $(tail -n 3 /tmp/supernode.txt)"
done_ "flower-supernode --help"

begin "numerics (imports, CPU build, ONNX Runtime inference, training with backward, ONNX export)"
python "$here/numerics.py" check "$here/ref" --cpu "$cpu" --work /tmp/numerics \
  || fail "the numerics check failed: $(why $?)"
done_ "numerics"

begin "Mosquitto (Debian arm64) on 127.0.0.1:1883"
cat >/tmp/mosquitto.conf <<EOF
listener 1883 127.0.0.1
allow_anonymous true
persistence false
user root
EOF
mosquitto -c /tmp/mosquitto.conf >/tmp/mosquitto.log 2>&1 &
broker_pid=$!
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/1883) 2>/dev/null && break
  kill -0 "$broker_pid" 2>/dev/null || fail "mosquitto exited: $(tail -n 3 /tmp/mosquitto.log)"
  sleep 0.2
done
(exec 3<>/dev/tcp/127.0.0.1/1883) 2>/dev/null || fail "mosquitto is not listening on 127.0.0.1:1883"
done_ "Mosquitto"

begin "agent start (dartfl edge run: torch, data, model, ONNX export, ORT sessions)"
# --slo-ms 15000 as the replay's: emulation runs a request 10-50x slower than a Pi, and with a
# Pi's 250 ms SLO deadline admission rightly refuses what it cannot answer in time (36 of 80
# under a loaded host); this test checks that everything runs, not a Pi's latency.
dartfl edge run --broker "$BROKER" --device "$DEVICE" --tasks "$TASKS" --max-train 500 \
  --profile-file "$here/pi-profile.toml" --publish-every-s 10 --seed 1 --slo-ms 15000 \
  >/tmp/agent.out 2>/tmp/agent.err &
agent_pid=$!
trap 'kill "$agent_pid" "$broker_pid" 2>/dev/null || true' EXIT
# Up to 25 minutes: torch alone takes 40 s to import here, and a loaded host slows emulation
# up to 10x. (Bash built-ins only in the loop: every other command is one more emulated process.)
for _ in $(seq 1500); do
  [[ $(</tmp/agent.err) == *serving* ]] && break
  if ! kill -0 "$agent_pid" 2>/dev/null; then
    wait "$agent_pid" && rc=0 || rc=$?
    fail "the agent exited ($(why "$rc")) before serving: $(tail -n 5 /tmp/agent.err)"
  fi
  read -rt 1 <> <(:) || true  # sleep 1, without an emulated /usr/bin/sleep
done
[[ $(</tmp/agent.err) == *serving* ]] || fail "the agent did not come online in 25 minutes: $(tail -n 5 /tmp/agent.err)"
done_ "agent start"

begin "replay: $((REPLAY_S * REPLAY_RATE)) requests over ${REPLAY_S} s (dartfl edge replay)"
# The replay waits 4 x its --slo-ms for stragglers after its last request (only the requester's
# view: the agent keeps its own 250 ms SLO). On a loaded host emulated replies took up to 11 s;
# 15 s makes that wait a minute, so a slow reply is not counted lost.
dartfl edge replay --broker "$BROKER" --device "$DEVICE" --workload poisson --rate "$REPLAY_RATE" \
  --duration-s "$REPLAY_S" --tasks "$TASKS" --slo-ms 15000 --seed 1 --json --no-store >/tmp/replay.json \
  || fail "dartfl edge replay failed ($(why $?))"
done_ "replay"

begin "agent stop (SIGTERM: drain, final report)"
kill -TERM "$agent_pid"
wait "$agent_pid" || fail "the agent failed on SIGTERM ($(why $?)): $(tail -n 5 /tmp/agent.err)"
kill "$broker_pid" 2>/dev/null || true
done_ "agent stop"

# Every request answered, none lost or in error, and the agent trained and re-exported its
# model (--publish-every-s) meanwhile: what the device must do, however slow the CPU.
python3 - /tmp/replay.json /tmp/agent.out "$cpu" <<'EOF'
import json
import sys

replay = json.load(open(sys.argv[1]))
lines = [line for line in open(sys.argv[2]) if line.startswith("{")]
if not lines:
    sys.exit(f"FAIL ({sys.argv[3]}): the agent printed no final report")
report = json.loads(lines[-1])
problems = []
if not replay["requests"] > 0:
    problems.append("the replay sent no requests")
if replay["replies"] != replay["requests"]:
    problems.append(f"{replay['replies']} replies to {replay['requests']} requests")
for key in ("lost", "errors", "rejected"):
    if replay[key]:
        problems.append(f"{replay[key]} {key}")
if not report["train_samples"] > 0:
    problems.append("the agent trained no samples")
if not report["model_version"] >= 1:
    problems.append(f"the agent never re-exported its model (version {report['model_version']})")
print(
    f"agent: {replay['replies']}/{replay['requests']} answered, "
    f"p50 {1e3 * replay['p50_latency_s']:.0f} ms, p99 {1e3 * replay['p99_latency_s']:.0f} ms, "
    f"accuracy {replay['accuracy']}, trained {report['train_samples']} samples, "
    f"model version {report['model_version']}"
)
if problems:
    sys.exit(f"FAIL ({sys.argv[3]}): " + "; ".join(problems))
EOF
echo "smoke test passed under $cpu"
