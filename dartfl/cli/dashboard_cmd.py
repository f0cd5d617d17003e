"""`dartfl dashboard`: start the Streamlit monitoring dashboard (dashboard/app.py), headless.

The dashboard runs as `python -m streamlit run` in place of this process (exec), so stopping
this command stops the server. Settings reach the app in environment variables
(dashboard.config). Nothing here imports streamlit: `dartfl --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from dartfl.cli.mqtt_args import add_mqtt_arguments, mqtt_security_from_args
from dartfl.errors import ConfigError, DartflError, InputError

DEFAULT_PORT = 8501
DEFAULT_ADDRESS = "127.0.0.1"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "dashboard",
        help="start the monitoring dashboard (Streamlit, headless)",
        description="Serve the live fleet view and experiment history on http://ADDRESS:PORT.",
    )
    p.add_argument("--store", type=Path, help="run store (default: $DARTFL_STORE or the per-user data dir)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT})")
    p.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        help=f"address to bind (default {DEFAULT_ADDRESS}: this machine only; 0.0.0.0 exposes it)",
    )
    p.add_argument(
        "--broker", help="MQTT broker for the live feed, e.g. mqtt://127.0.0.1:1883 or mqtts://HOST:8883"
    )
    p.add_argument(
        "--stale-after-s", type=float, default=10.0, help="a device is stale after this silence (default 10)"
    )
    p.add_argument(
        "--gone-after-s", type=float, default=60.0, help="a device is gone after this silence (default 60)"
    )
    p.add_argument(
        "--slo-target",
        type=float,
        default=0.95,
        help="devices below this SLO attainment stand out (default 0.95)",
    )
    p.add_argument("--refresh-s", type=float, default=2.0, help="live view refresh interval (default 2 s)")
    add_mqtt_arguments(p)
    p.set_defaults(handler=run)


def streamlit_command(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The streamlit command line and the environment for the app; raises InputError for bad flags."""
    import dashboard
    from dartfl.paths import default_store_path
    from dartfl.store import check_store_file
    from dashboard.config import DashboardConfig
    from dashboard.telemetry import Liveness

    if not 1 <= args.port <= 65535:
        raise InputError(f"--port must be 1-65535, got {args.port}")
    security = mqtt_security_from_args(args)  # a bad URL or file fails here, not silently in the app
    store_path = (args.store or default_store_path()).expanduser().resolve()
    try:
        # A CSV or a typo is named now, not in the browser later; an empty file is a new store,
        # as `dartfl record` treats it (the pages say how to produce data, and never write it).
        check_store_file(store_path, empty_ok=True)
        cfg = DashboardConfig(
            store_path=store_path,
            broker_url=args.broker,
            mqtt_security=security,
            liveness=Liveness(args.stale_after_s, args.gone_after_s),
            slo_target=args.slo_target,
            refresh_s=args.refresh_s,
        )
    except ConfigError as exc:
        raise InputError(str(exc)) from exc
    # The package's own file, not a name: the wheel installs it as dartfl_dashboard.
    app = Path(dashboard.__file__).resolve().parent / "app.py"
    argv = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app),
        "--server.headless=true",
        f"--server.address={args.address}",
        f"--server.port={args.port}",
        "--browser.gatherUsageStats=false",
        "--server.fileWatcherType=none",
        "--global.developmentMode=false",
        "--client.toolbarMode=minimal",
        "--theme.base=light",
    ]
    return argv, {**os.environ, **cfg.to_env()}


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("streamlit") is None:
        raise DartflError(
            "streamlit is not installed: pip install 'dartfl[dashboard]' "
            "(in a checkout: scripts/pip-install PYTHON dashboard)"
        )
    argv, env = streamlit_command(args)
    print(f"dartfl dashboard: serving http://{args.address}:{args.port} (run store {env['DARTFL_STORE']})")
    sys.stdout.flush()
    os.execve(argv[0], argv, env)  # replaces this process; returns only by raising OSError
    return 1  # pragma: no cover
