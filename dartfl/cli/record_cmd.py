"""`dartfl record`: persist the fleet's MQTT telemetry into the run store.

Runs until interrupted (Ctrl-C or SIGTERM) or for `--duration-s`. The dashboard's device
history and fleet charts read what it writes. A broker that is down is retried; nothing is
lost while the recorder runs except what devices could not publish. A run of `--duration-s`
that heard no telemetry at all fails (exit 1) saying why that may be: a broker's ACL drops
what an account may not read without telling it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from dartfl.cli.mqtt_args import add_mqtt_arguments, mqtt_security_from_args
from dartfl.errors import DartflError, InputError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "record",
        help="record device telemetry from MQTT into the run store",
        description="Subscribe to dartfl/v1/+/telemetry and append every snapshot to the run store.",
    )
    p.add_argument(
        "--broker", required=True, help="broker URL, e.g. mqtt://127.0.0.1:1883 or mqtts://HOST:8883 (TLS)"
    )
    p.add_argument("--store", type=Path, help="run store (default: $DARTFL_STORE or the per-user data dir)")
    p.add_argument("--flush-s", type=float, default=1.0, help="write to the store this often (default 1 s)")
    p.add_argument(
        "--retention-h",
        type=float,
        default=24.0,
        help="delete telemetry older than this many hours (default 24; 0 keeps everything)",
    )
    p.add_argument(
        "--max-ahead-s",
        type=float,
        default=300.0,
        help="refuse snapshots dated more than this far ahead of this host's clock (default 300)",
    )
    p.add_argument(
        "--max-rows-per-device",
        type=int,
        default=200_000,
        help="keep at most this many snapshots per device, the oldest go first (default 200000)",
    )
    p.add_argument(
        "--max-devices", type=int, default=1_000, help="record at most this many devices (default 1000)"
    )
    p.add_argument("--duration-s", type=float, help="stop after this long (default: run until stopped)")
    add_mqtt_arguments(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from dartfl.cli.recording import check_store
    from dartfl.paths import default_store_path
    from dartfl.store.limits import TelemetryLimits
    from dashboard.recorder import Recorder

    security = mqtt_security_from_args(args)  # checks the URL and the TLS files too
    if args.flush_s <= 0 or args.retention_h < 0 or (args.duration_s is not None and args.duration_s <= 0):
        raise InputError(
            f"--flush-s and --duration-s must be > 0 and --retention-h >= 0, got "
            f"{args.flush_s}, {args.duration_s}, {args.retention_h}"
        )
    limits = TelemetryLimits(  # ConfigError (exit 2) names a bad bound
        retention_s=args.retention_h * 3600.0 or None,
        max_ahead_s=args.max_ahead_s,
        max_rows_per_device=args.max_rows_per_device,
        max_devices=args.max_devices,
    )
    store = args.store or default_store_path()
    check_store(store)  # a read-only store is named now, not in a warning every flush
    recorder = Recorder(store, args.broker, flush_s=args.flush_s, limits=limits, security=security)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"dartfl record: {args.broker} -> {store}", flush=True)
    silence = None
    try:
        recorder.run(stop, args.duration_s)
        if args.duration_s is not None:
            silence = recorder.silence()  # while the subscriber still says how it is doing
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        recorder.close()
    print(f"dartfl record: {_summary(recorder)}")
    sys.stdout.flush()
    if silence is not None:
        raise DartflError(silence)
    return 0


def _summary(recorder: Any) -> str:
    """The closing line, e.g. 120 snapshots written (1 bad messages ignored; 3 refused: ...)."""
    from dartfl.store.limits import REFUSALS

    notes = [f"{recorder.bad} bad messages ignored"]
    refused = sum(recorder.refused.values())
    if refused:
        reasons = ", ".join(f"{n} {REFUSALS[why]}" for why, n in sorted(recorder.refused.items()))
        notes.append(f"{refused} refused: {reasons}")
    return f"{recorder.written} snapshots written ({'; '.join(notes)})"
