"""The service commands: ``worker``, ``beat``, ``dashboard``, ``metrics``, the ``embedded`` server.

Each ``add_*`` function adds one top-level command to the tree and points it
at its handler; ``venturi.cli`` calls them in the order ``venturi --help``
lists the commands. The optional extras (the dashboard, Prometheus) are
imported only by the command that needs them, and a missing one is a usage
error that names the extra to install.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import signal
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING, Any

from venturi.cli.common import (
    EXIT_NOT_RUNNING,
    EXIT_OK,
    Commands,
    UsageError,
    add_command,
    add_log_options,
    add_read_url_option,
    duration_argument,
    logger,
    open_app,
    port_argument,
    positive_int_argument,
    seconds_argument,
    write_lines,
)
from venturi.health import DEFAULT_HOST, HealthServer, readiness

if TYPE_CHECKING:
    from venturi.app import App

__all__ = [
    "DASHBOARD_TOKEN_ENV",
    "add_beat",
    "add_dashboard",
    "add_embedded",
    "add_metrics",
    "add_worker",
]

DASHBOARD_TOKEN_ENV = "VENTURI_DASHBOARD_TOKEN"


# -------------------------------------------------------------------- worker


def add_worker(commands: Commands) -> None:
    worker = add_command(commands, "worker", "run a worker until SIGTERM/SIGINT", _cmd_worker)
    add_log_options(worker)
    worker.add_argument(
        "--concurrency",
        type=positive_int_argument,
        default=8,
        metavar="N",
        help="handler threads (default: 8)",
    )
    worker.add_argument(
        "--async-concurrency",
        type=positive_int_argument,
        default=None,
        metavar="N",
        help="async handlers running at once on the worker's event loop (default: 100)",
    )
    worker.add_argument(
        "--kinds",
        type=_kinds_argument,
        default=None,
        metavar="A,B",
        help="serve only these kinds (default: every task of the App)",
    )
    worker.add_argument(
        "--grace",
        type=seconds_argument,
        default=30.0,
        metavar="SECONDS",
        help="on shutdown, how long running handlers may finish (default: 30)",
    )
    worker.add_argument(
        "--retention",
        type=duration_argument,
        default=None,
        metavar="DURATION",
        help="delete terminal jobs finished longer ago than this, e.g. 7d (default: keep all)",
    )
    worker.add_argument(
        "--prefetch",
        type=_prefetch_argument,
        default=None,
        metavar="N",
        help="most claimed jobs held for busy handlers, only while jobs are short "
        "(default: 256, at most 1000; 0: claim only for free handlers)",
    )
    worker.add_argument(
        "--metrics-port",
        type=port_argument,
        default=None,
        metavar="N",
        help="serve this worker's run metrics on http://0.0.0.0:N/metrics "
        "(needs venturi[prometheus]; queue gauges: `venturi metrics`)",
    )
    _add_health_options(worker)


def _kinds_argument(text: str) -> list[str]:
    kinds = [kind.strip() for kind in text.split(",") if kind.strip()]
    if not kinds:
        raise argparse.ArgumentTypeError(f"invalid kinds {text!r}: give a comma-separated list")
    return kinds


def _prefetch_argument(text: str) -> int:
    from venturi.worker import MAX_PREFETCH

    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_PREFETCH:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: must be 0 or a positive integer up to {MAX_PREFETCH}"
        )
    return value


def _cmd_worker(args: argparse.Namespace) -> int:
    from venturi.worker import Worker

    with closing(open_app(args)) as app, _serving_health(app, args):
        if not app.tasks():
            raise UsageError("no tasks to run: pass --app module:attribute to load your tasks")
        if args.metrics_port is not None:
            _serve_run_metrics(app, args.metrics_port)
        Worker(
            app,
            concurrency=args.concurrency,
            **(
                {"async_concurrency": args.async_concurrency}
                if args.async_concurrency is not None
                else {}
            ),
            kinds=args.kinds,
            grace=args.grace,
            retention=args.retention,
            prefetch=args.prefetch,
        ).run()
    return EXIT_OK


# ---------------------------------------------------------------------- beat


def add_beat(commands: Commands) -> None:
    beat = add_command(
        commands, "beat", "run the periodic scheduler (one active per prefix)", _cmd_beat
    )
    add_log_options(beat)
    _add_health_options(beat)


def _cmd_beat(args: argparse.Namespace) -> int:
    from venturi.beat import Beat

    with closing(open_app(args)) as app, _serving_health(app, args):
        if not app.schedules() and not app.stored_schedules():
            raise UsageError("no schedules to run: pass --app module:attribute to load your tasks")
        Beat(app).run()
    return EXIT_OK


# -------------------------------------------------------------------- health


def _add_health_options(parser: argparse.ArgumentParser) -> None:
    """``--health-port`` and ``--health-host`` of ``worker`` and ``beat`` (ADR 0136)."""
    parser.add_argument(
        "--health-port",
        type=port_argument,
        default=None,
        metavar="N",
        help="serve GET /healthz (the loops run) and GET /readyz (the database answers, "
        "the schema is current) on port N, for liveness and readiness probes",
    )
    parser.add_argument(
        "--health-host",
        default=DEFAULT_HOST,
        metavar="HOST",
        help=f"address the health checks bind (default: {DEFAULT_HOST}, where a kubelet "
        "probes the pod)",
    )


@contextmanager
def _serving_health(app: App, args: argparse.Namespace) -> Iterator[None]:
    """The health server for as long as the service runs; bound before it starts,
    so a port in use fails the command at once."""
    if args.health_port is None:
        yield
        return
    server = HealthServer(
        lambda: readiness(app.check_schema), port=args.health_port, host=args.health_host
    )
    server.start()
    try:
        yield
    finally:
        server.stop()


# ------------------------------------------------------------------ embedded


def add_embedded(commands: Commands) -> None:
    embedded = add_command(commands, "embedded", "the embedded server used without a URL", None)
    acts = embedded.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_command(acts, "status", "is it running? exit 0 if so, 3 if not", _cmd_embedded_status)
    add_command(acts, "stop", "stop it: it outlives the programs using it", _cmd_embedded_stop)


def _cmd_embedded_status(args: argparse.Namespace) -> int:
    from venturi.postgres.embedded import embedded_status

    server = embedded_status()
    if not server.running:
        write_lines([f"embedded server not running (data {server.data_directory})"])
        return EXIT_NOT_RUNNING
    write_lines(
        [
            f"embedded server running: pid {server.pid}, port {server.port}, "
            f"PostgreSQL {server.version}, url {server.url}, data {server.data_directory}"
        ]
    )
    return EXIT_OK


def _cmd_embedded_stop(args: argparse.Namespace) -> int:
    from venturi.postgres.embedded import embedded_directory, stop_embedded_server

    server = stop_embedded_server()
    if server is None:
        write_lines(
            [f"embedded server not running, nothing to stop (data {embedded_directory()})"]
        )
    else:
        write_lines([f"embedded server stopped: pid {server.pid} (data {server.data_directory})"])
    return EXIT_OK


# ----------------------------------------------------------------- dashboard


def add_dashboard(commands: Commands) -> None:
    dashboard = add_command(
        commands, "dashboard", "serve the web dashboard (loopback only by default)", _cmd_dashboard
    )
    dashboard.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default: 127.0.0.1, loopback only; any other needs --token "
        f"or ${DASHBOARD_TOKEN_ENV})",
    )
    dashboard.add_argument(
        "--port", type=positive_int_argument, default=8080, help="port (default: 8080)"
    )
    access = dashboard.add_mutually_exclusive_group()
    access.add_argument(
        "--token",
        metavar="T",
        help=f"token that signs in, to read and to change (default: ${DASHBOARD_TOKEN_ENV}, "
        "else a random one, printed at start, on loopback only)",
    )
    access.add_argument(
        "--read-only",
        action="store_true",
        help="show everything, allow no change, no sign-in (loopback only)",
    )
    dashboard.add_argument(
        "--public-read",
        action="store_true",
        help="reading needs no sign-in, only changes need the token",
    )
    add_read_url_option(dashboard)


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_bind(args: argparse.Namespace, token: str | None) -> None:
    """Beyond loopback: refuse without a token given, warn once that HTTP is plain.

    A random token is a loopback convenience: beyond it the dashboard is for
    other people, who need a token that survives a restart and was not read
    off the service's log (ADR 0117, amendment).
    """
    if _is_loopback(args.host):
        return
    if token is None:
        why, fix = "no token was given", "pass"
        if args.read_only:
            why, fix = "a read-only dashboard has no sign-in", "drop --read-only and pass"
        raise UsageError(
            f"refusing to serve the dashboard on {args.host} beyond loopback without a token "
            f"({why}): anyone who reaches it would read every payload, result and traceback; "
            f"{fix} --token T (8 characters or more) or set ${DASHBOARD_TOKEN_ENV}, "
            "or bind --host 127.0.0.1"
        )
    reads = "; reading needs no sign-in (--public-read)" if args.public_read else ""
    logger.warning(
        "the dashboard on %s is plain HTTP beyond loopback: the token, the session cookie "
        "and every page cross the network unencrypted%s; serve it through a TLS-terminating "
        "proxy, or bind --host 127.0.0.1",
        args.host,
        reads,
    )


def _cmd_dashboard(args: argparse.Namespace) -> int:
    """Serve the web dashboard (the ``dashboard`` extra) until SIGINT/SIGTERM."""
    try:
        import uvicorn

        from venturi.dashboard import create_app
    except ImportError as exc:
        raise UsageError(
            f"the dashboard needs its extra: pip install 'venturi[dashboard]' ({exc})"
        ) from None
    token = None if args.read_only else args.token or os.environ.get(DASHBOARD_TOKEN_ENV)
    _check_bind(args, token)
    with closing(open_app(args)) as app:
        if args.read_only:
            mode = "read-only"
        elif args.public_read:
            mode = "changes need the token"
        else:
            mode = "reading and changes need the token"
        if not args.read_only and token is None:
            token = secrets.token_urlsafe(24)
            uses = "to make changes" if args.public_read else "to read and make changes"
            write_lines([f"dashboard token (sign in with it {uses}): {token}"])
        asgi = create_app(app, token=token, read_only=args.read_only, public_read=args.public_read)
        write_lines([f"venturi dashboard on http://{args.host}:{args.port}/ ({mode})"])
        # uvicorn stops on SIGINT/SIGTERM, then re-raises the signal to the handler
        # it found: a no-op one makes a requested stop exit 0, as `worker` does.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: None)
        uvicorn.run(asgi, host=args.host, port=args.port, log_level="warning")
    return EXIT_OK


# -- metrics (venturi[prometheus], ADR 0127) ------------------------------------------


def add_metrics(commands: Commands) -> None:
    parser = add_command(
        commands, "metrics", "serve the queue gauges to Prometheus (/metrics)", _cmd_metrics
    )
    add_log_options(parser)
    parser.add_argument(
        "--port", type=port_argument, default=9464, metavar="N", help="default: 9464"
    )
    parser.add_argument(
        "--host", default="0.0.0.0", metavar="HOST", help="address to bind (default: 0.0.0.0)"
    )
    parser.add_argument(
        "--interval",
        type=seconds_argument,
        default=15.0,
        metavar="SECONDS",
        help="read the queue's stats at most this often, however often it is scraped (default: 15)",
    )


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise UsageError(
            "metrics need prometheus-client: pip install 'venturi[prometheus]'"
        ) from None
    return prometheus_client


def _serve_run_metrics(app: App, port: int) -> None:
    prometheus_client = _prometheus()
    from venturi.contrib.prometheus import RunMetrics

    RunMetrics(app)
    prometheus_client.start_http_server(port)
    logger.info("serving run metrics on port %d (/metrics)", port)


def _cmd_metrics(args: argparse.Namespace) -> int:
    prometheus_client = _prometheus()
    from venturi.contrib.prometheus import QueueMetrics

    stop = threading.Event()
    with closing(open_app(args)) as app:
        app.check_schema()
        registry = prometheus_client.CollectorRegistry()
        QueueMetrics(app, min_interval=args.interval, registry=registry)
        server, thread = prometheus_client.start_http_server(
            args.port, addr=args.host, registry=registry
        )
        logger.info(
            "serving queue metrics of prefix %s on %s:%d (/metrics)",
            app.prefix,
            args.host,
            args.port,
        )
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        stop.wait()
        server.shutdown()
        thread.join()
    return EXIT_OK
