"""The fleetfish Redfish API: ``create_app()`` builds the Flask app (serve with gunicorn)."""

from __future__ import annotations

import logging

import redis
from flask import Flask, request
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from app import auth, errors, fleet_view, metrics, protocol
from app.bcrypt_budget import BcryptBudget
from app.dispatch import make_celery
from app.resources import (
    account_service,
    bios,
    chassis,
    log_service,
    manager_network,
    managers,
    media_certificates,
    registries,
    secure_boot,
    service_root,
    session_service,
    storage,
    system_parts,
    systems,
    task_service,
    virtual_media,
)
from app.sessions import Lockout, Sessions
from fleetfish.accounts import AccountStore
from fleetfish.eventlog import EventLog
from fleetfish.settings import Settings
from fleetfish.store import Store

log = logging.getLogger("fleetfish.api")
LOOPBACK_BINDS = frozenset({"127.0.0.1", "::1", "localhost"})


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or Settings.from_env()
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.url_map.strict_slashes = False
    app.json.sort_keys = False
    logging.getLogger("fleetfish.api").setLevel(settings.log_level)

    # A few fast retries only: with Redis gone the client should get a 503 quickly, not hang.
    store = Store.from_url(
        settings.redis_url,
        task_ttl=settings.task_result_ttl,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
    )
    client: redis.Redis = store.r
    app.extensions["fleetfish.settings"] = settings
    app.extensions["fleetfish.store"] = store
    app.extensions["fleetfish.events"] = EventLog(client, settings.event_log_entries)
    app.extensions["fleetfish.celery"] = make_celery(settings)
    accounts = AccountStore(client)
    app.extensions["fleetfish.accounts"] = accounts
    app.extensions["fleetfish.users"] = auth.UserDB(settings.users_file, accounts)
    app.extensions["fleetfish.sessions"] = Sessions(client, settings.session_timeout)
    app.extensions["fleetfish.lockout"] = Lockout(client, accounts)
    app.extensions["fleetfish.bcrypt_budget"] = BcryptBudget(share=settings.bcrypt_share)

    # Order matters: metrics time everything, protocol checks, then auth, then the resources.
    app.extensions["fleetfish.metrics"] = metrics.install(app)
    protocol.install_request_checks(app)
    auth.install(app)
    protocol.install(app)
    errors.register_error_handlers(app)

    for module in (
        service_root,
        systems,
        system_parts,
        secure_boot,
        bios,
        storage,
        managers,
        manager_network,
        chassis,
        task_service,
        session_service,
        account_service,
        registries,
        fleet_view,
    ):
        app.register_blueprint(module.bp)
    app.register_blueprint(virtual_media.bp, url_prefix="/redfish/v1/Systems", name="system_media")
    app.register_blueprint(
        virtual_media.bp, url_prefix="/redfish/v1/Managers", name="manager_media"
    )
    app.register_blueprint(
        media_certificates.bp, url_prefix="/redfish/v1/Systems", name="system_certs"
    )
    app.register_blueprint(
        media_certificates.bp, url_prefix="/redfish/v1/Managers", name="manager_certs"
    )
    app.register_blueprint(log_service.bp, url_prefix="/redfish/v1/Systems", name="system_logs")
    app.register_blueprint(log_service.bp, url_prefix="/redfish/v1/Managers", name="manager_logs")

    @app.after_request
    def _log(resp):
        if log.isEnabledFor(logging.DEBUG):  # skip building the arguments on the hot path
            log.debug(
                "%s %s -> %s system=%s",
                request.method,
                request.path,
                resp.status_code,
                (request.view_args or {}).get("system_id", "-"),
            )
        return resp

    app.wsgi_app = protocol.StripTrailingSlash(app.wsgi_app)
    warn_plain_http(settings)
    log.info("ready (redis %s)", settings.redis_url.rsplit("@", 1)[-1])
    return app


def warn_plain_http(settings: Settings) -> None:
    """One line at start when credentials would cross a network in clear text.

    Loopback (the lab, a TLS proxy on the same host) is not a network; a TLS-terminating proxy
    elsewhere is, between itself and this process.
    """
    if (settings.tls_cert and settings.tls_key) or settings.bind in LOOPBACK_BINDS:
        return
    log.warning(
        "SECURITY WARNING: serving plain HTTP on %s:%s, Basic credentials and session tokens "
        "travel in clear text; set FLEETFISH_TLS_CERT and FLEETFISH_TLS_KEY to serve HTTPS "
        "(and FLEETFISH_REQUIRE_TLS=1 to refuse credentials over HTTP)",
        settings.bind,
        settings.port,
    )
