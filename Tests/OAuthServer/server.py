#!/usr/bin/env python3
"""Test OAuth 2.0 authorization server for the TokenVault test suite.

Built on Authlib's AuthorizationServer (Flask integration) with in-memory
models. It serves:

* RFC 8414 metadata (/.well-known/oauth-authorization-server) and the same
  document at /.well-known/openid-configuration;
* /authorize: authorization code grant, auto-approved (no UI), PKCE S256
  required for public clients, loopback redirect URIs matched ignoring the
  port (RFC 8252 section 7.3);
* /token: authorization_code (+PKCE), refresh_token (rotation, reuse
  detection, a one-time grace replay), client_credentials and the RFC 8628
  device_code grant; client auth client_secret_basic, client_secret_post and
  none;
* /revoke: RFC 7009 (revoking a refresh token revokes its whole grant);
* /device_authorization and /device: RFC 8628;
* /userinfo and /api/me: a protected resource (200 or 401);
* /_control (POST JSON) and /_stats (GET): knobs, injected failures and
  counters for the tests. See README.md beside this file.

Usage: python server.py --port 0 [--host 127.0.0.1] [--quiet]
Prints exactly one line, "READY http://127.0.0.1:PORT", on stdout once
listening; logs (request lines only, never a token) go to stderr.
"""

from __future__ import annotations

import argparse
import copy
import ipaddress
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import time
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from flask import Flask, Response, jsonify, request
from werkzeug.serving import WSGIRequestHandler, make_server

from authlib.common.urls import add_params_to_uri
from authlib.integrations.flask_oauth2 import AuthorizationServer, ResourceProtector
from authlib.oauth2.rfc6749 import (
    AuthorizationCodeMixin,
    ClientMixin,
    InvalidGrantError,
    InvalidRequestError,
    OAuth2Error,
    TokenMixin,
    grants,
)
from authlib.oauth2.rfc6750 import BearerTokenValidator
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from authlib.oauth2.rfc8628 import (
    DEVICE_CODE_GRANT_TYPE,
    DeviceAuthorizationEndpoint,
    DeviceCodeGrant,
    DeviceCredentialDict,
)

log = logging.getLogger("oauth-server")

# One lock guards every piece of mutable state below (settings, the token
# store, the failure queue, stats). Token-endpoint processing runs under it as
# a whole, so two concurrent refreshes with one refresh token are serialised
# exactly like a real server with a transactional store would.
LOCK = threading.RLock()

#: Base URL ("http://127.0.0.1:PORT"), set once the socket is bound.
BASE_URL = ""

ALL_CLIENT_AUTH = ["client_secret_basic", "client_secret_post", "none"]
GRANT_ALIASES = {"device_code": DEVICE_CODE_GRANT_TYPE}


def now() -> float:
    return time.time()


def new_token(prefix: str) -> str:
    """A random, recognisable token string (at_…, rt_…, ac_…)."""
    return prefix + secrets.token_urlsafe(32)


# --------------------------------------------------------------------------
# Settings (knobs). Each has a default and a validator; /_control checks the
# type of every value and rejects unknown keys, so a typo in a test fails
# loudly instead of being ignored.
# --------------------------------------------------------------------------


def _num(nullable=False, minimum=0):
    def check(v):
        if v is None and nullable:
            return True
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= minimum

    check.desc = "number >= %s%s" % (minimum, " or null" if nullable else "")
    return check


def _int(nullable=False, minimum=0):
    def check(v):
        if v is None and nullable:
            return True
        return isinstance(v, int) and not isinstance(v, bool) and v >= minimum

    check.desc = "integer >= %s%s" % (minimum, " or null" if nullable else "")
    return check


def _bool(v):
    return isinstance(v, bool)


_bool.desc = "boolean"


def _str(nullable=False):
    def check(v):
        return isinstance(v, str) or (nullable and v is None)

    check.desc = "string%s" % (" or null" if nullable else "")
    return check


def _dict(v):
    return isinstance(v, dict)


_dict.desc = "object"


def _str_list(v):
    return isinstance(v, list) and v and all(isinstance(x, str) for x in v)


_str_list.desc = "non-empty array of strings"


def _separator(v):
    return v in (" ", ",")


_separator.desc = '" " or ","'

SETTINGS_SPEC = {
    # -- access tokens
    "access_token_lifetime": (3600, _num(nullable=True)),  # null: never expires
    "include_expires_in": (True, _bool),
    "token_type": ("Bearer", _str()),
    "extra_token_fields": ({}, _dict),
    # -- refresh tokens
    "issue_refresh_tokens": (True, _bool),
    "refresh_token_lifetime": (None, _num(nullable=True)),
    "rotate_refresh_tokens": (True, _bool),
    "refresh_grace_seconds": (10, _num()),
    "revoke_family_on_reuse": (True, _bool),
    # -- scopes
    "default_scope": ("read write", _str()),
    "response_scope": (None, _str(nullable=True)),
    "include_scope": (True, _bool),
    "scope_separator": (" ", _separator),
    # -- authorization endpoint
    "authorize_error": (None, _str(nullable=True)),
    "authorize_wrong_state": (False, _bool),
    "redirect_uris": (
        ["http://127.0.0.1/callback", "http://[::1]/callback"],
        _str_list,
    ),
    "subject": ("tv-test-user", _str()),
    # -- device flow
    "device_interval": (1, _int()),
    "device_code_lifetime": (600, _num(minimum=0)),
    "device_enforce_interval": (True, _bool),
    "device_slow_down_increment": (5, _int()),
    "device_approve_after_polls": (None, _int(nullable=True)),
    "device_approve_on_visit": (False, _bool),
    # -- discovery
    "metadata_overrides": ({}, _dict),
}

SETTINGS = {k: copy.deepcopy(v[0]) for k, v in SETTINGS_SPEC.items()}


def setting(name):
    with LOCK:
        return SETTINGS[name]


# --------------------------------------------------------------------------
# In-memory models
# --------------------------------------------------------------------------


class User:
    def __init__(self, sub: str):
        self.id = sub

    def get_user_id(self):
        return self.id


def is_loopback_host(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def redirect_uri_allowed(uri: str) -> bool:
    """Exact match against the registered redirect URIs, except that for
    http loopback IP literals the port is ignored (RFC 8252 section 7.3)."""
    try:
        req = urlsplit(uri)
        req.port  # raises ValueError for a malformed port
    except ValueError:
        return False
    if req.fragment:
        return False
    for registered in setting("redirect_uris"):
        if uri == registered:
            return True
        reg = urlsplit(registered)
        if (
            req.scheme == "http"
            and reg.scheme == "http"
            and req.hostname is not None
            and req.hostname == reg.hostname
            and is_loopback_host(req.hostname)
            and req.hostname != "localhost"
            and req.path == reg.path
            and req.query == reg.query
        ):
            return True
    return False


class Client(ClientMixin):
    def __init__(self, client_id, secret, auth_methods, grant_types):
        self.client_id = client_id
        self.client_secret = secret
        self.auth_methods = set(auth_methods)
        self.grant_types = set(grant_types)

    @property
    def is_public(self):
        return self.auth_methods == {"none"}

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return setting("redirect_uris")[0]

    def get_allowed_scope(self, scope):
        # Any requested scope is granted; none requested means the default.
        return scope if scope else setting("default_scope")

    def check_redirect_uri(self, redirect_uri):
        return redirect_uri_allowed(redirect_uri)

    def check_client_secret(self, client_secret):
        return self.client_secret is not None and secrets.compare_digest(
            self.client_secret.encode(), client_secret.encode()
        )

    def check_endpoint_auth_method(self, method, endpoint):
        return method in self.auth_methods

    def check_response_type(self, response_type):
        return response_type == "code" and "authorization_code" in self.grant_types

    def check_grant_type(self, grant_type):
        return grant_type in self.grant_types


_USER_GRANTS = ["authorization_code", "refresh_token", DEVICE_CODE_GRANT_TYPE]
CLIENTS = {
    c.client_id: c
    for c in [
        Client("public-cli", None, ["none"], _USER_GRANTS),
        Client("basic-cli", "basic-secret", ["client_secret_basic"],
               _USER_GRANTS + ["client_credentials"]),
        Client("post-cli", "post-secret", ["client_secret_post"],
               _USER_GRANTS + ["client_credentials"]),
        Client("cc-cli", "cc-secret", ["client_secret_basic", "client_secret_post"],
               ["client_credentials"]),
    ]
}


class AuthCode(AuthorizationCodeMixin):
    LIFETIME = 600

    def __init__(self, code, client_id, redirect_uri, scope, subject,
                 code_challenge, code_challenge_method):
        self.code = code
        self.client_id = client_id
        self.redirect_uri = redirect_uri
        self.scope = scope
        self.subject = subject
        self.code_challenge = code_challenge
        self.code_challenge_method = code_challenge_method
        self.expires_at = now() + self.LIFETIME
        self.used = False
        self.family = None  # the grant created from it, once exchanged

    def get_redirect_uri(self):
        return self.redirect_uri

    def get_scope(self):
        return self.scope


class _Token(TokenMixin):
    """Common part of access and refresh tokens."""

    def __init__(self, client_id, subject, scope, family, lifetime):
        self.client_id = client_id
        self.subject = subject
        self.scope = scope
        self.family = family
        self.issued_at = now()
        self.lifetime = lifetime
        self.expires_at = None if lifetime is None else self.issued_at + lifetime
        self.revoked = False

    def check_client(self, client):
        return client.get_client_id() == self.client_id

    def get_scope(self):
        return self.scope

    def get_expires_in(self):
        return self.lifetime

    def is_expired(self):
        return self.expires_at is not None and now() >= self.expires_at

    def is_revoked(self):
        return self.revoked

    def get_user(self):
        return User(self.subject)

    def get_client(self):
        return CLIENTS.get(self.client_id)


class AccessToken(_Token):
    def __init__(self, value, *args):
        super().__init__(*args)
        self.access_token = value

    def is_valid(self):
        return not self.revoked and not self.is_expired()


class RefreshToken(_Token):
    def __init__(self, value, *args):
        super().__init__(*args)
        self.refresh_token = value
        self.rotated_to = None  # the refresh token that replaced this one
        self.rotated_at = None
        self.replay_response = None  # the response that rotated it
        self.replayed = False

    def is_valid(self):
        return not self.revoked and not self.is_expired() and self.rotated_to is None


class DeviceCredential(DeviceCredentialDict):
    """device_code record; status: pending, approved, denied, consumed."""


class Store:
    """All tokens, codes and device credentials. Tokens are grouped in
    families: one family per authorization grant (a code exchange, a device
    approval, a client_credentials request); refreshes stay in the family."""

    def __init__(self):
        self.clear()

    def clear(self):
        self.codes: dict[str, AuthCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.families: dict[int, list[_Token]] = {}
        self.devices: dict[str, DeviceCredential] = {}  # by device_code
        self.user_codes: dict[str, DeviceCredential] = {}  # by user_code
        self.issue_meta: dict[str, dict] = {}  # access token -> scope, lifetime
        self._next_family = 1

    def new_family(self) -> int:
        fid = self._next_family
        self._next_family += 1
        self.families[fid] = []
        return fid

    def add(self, token: _Token):
        if isinstance(token, AccessToken):
            self.access[token.access_token] = token
        else:
            self.refresh[token.refresh_token] = token
        self.families.setdefault(token.family, []).append(token)

    def revoke_family(self, fid):
        for token in self.families.get(fid, []):
            token.revoked = True

    def find(self, value):
        return self.access.get(value) or self.refresh.get(value)


STORE = Store()


# --------------------------------------------------------------------------
# Stats
# --------------------------------------------------------------------------


def fresh_stats():
    return {
        "token_requests": {"total": 0},
        "token_success": {"total": 0},
        "token_errors": {},
        "refresh_requests": 0,
        "refresh_success": 0,
        "refresh_reuse_detected": 0,
        "refresh_replayed": 0,
        "code_reuse_detected": 0,
        "revocations": {"total": 0, "refresh_token": 0, "access_token": 0, "unknown": 0},
        "revocations_by_hint": {"refresh_token": 0, "access_token": 0, "none": 0},
        "injected_failures": {"total": 0},
        "dropped_connections": 0,
        "authorize_requests": 0,
        "device_authorizations": 0,
        "userinfo": {"ok": 0, "unauthorized": 0},
        "in_flight_token_requests": 0,
        "max_concurrent_token_requests": 0,
        "token_log": [],
        "authorize_log": [],
    }


STATS = fresh_stats()
LOG_LIMIT = 500


def bump(path, key, n=1):
    """STATS[path][key] += n, creating the key."""
    d = STATS[path]
    d[key] = d.get(key, 0) + n


def append_log(name, entry):
    entries = STATS[name]
    entries.append(entry)
    del entries[:-LOG_LIMIT]


# --------------------------------------------------------------------------
# Injected failures
# --------------------------------------------------------------------------

# kind -> extra fields it accepts (beyond count, grant_type, endpoint, delay)
FAILURE_KINDS = {
    "http_500": {"body"},
    "http_503": {"retry_after", "body"},
    "http_429": {"retry_after", "body"},
    "slow": {"seconds"},
    "drop": {"process"},
    "invalid_grant": {"description"},
    "invalid_client": {"description"},
    "oauth_error": {"error", "description", "status"},
    "html": {"status"},
    "missing_access_token": set(),
    "missing_token_type": set(),
    "wrong_token_type": {"token_type"},
    "error_200": {"error", "description"},
    "comma_scope": set(),
    "custom": {"status", "body", "headers", "content_type"},
}
FAILURE_COMMON = {"kind", "count", "grant_type", "endpoint", "delay"}
FAILURE_ENDPOINTS = {"token", "revoke", "device_authorization"}
FAILURES: list[dict] = []


def validate_failure(raw) -> dict:
    if not isinstance(raw, dict):
        raise ValueError("fail: each entry must be an object")
    kind = raw.get("kind")
    if kind not in FAILURE_KINDS:
        raise ValueError("fail.kind: unknown kind %r (one of %s)" % (kind, ", ".join(sorted(FAILURE_KINDS))))
    unknown = set(raw) - FAILURE_COMMON - FAILURE_KINDS[kind]
    if unknown:
        raise ValueError("fail: unknown field(s) for kind %s: %s" % (kind, ", ".join(sorted(unknown))))
    f = dict(raw)
    f.setdefault("count", 1)
    f.setdefault("endpoint", "token")
    f.setdefault("delay", 0)
    if not _int(minimum=1)(f["count"]):
        raise ValueError("fail.count: integer >= 1")
    if f["endpoint"] not in FAILURE_ENDPOINTS:
        raise ValueError("fail.endpoint: one of %s" % ", ".join(sorted(FAILURE_ENDPOINTS)))
    if not _num()(f["delay"]):
        raise ValueError("fail.delay: number >= 0")
    if "seconds" in f and not _num()(f["seconds"]):
        raise ValueError("fail.seconds: number >= 0")
    if "status" in f and not _int(minimum=100)(f["status"]):
        raise ValueError("fail.status: integer HTTP status")
    if "retry_after" in f and not (f["retry_after"] is None or isinstance(f["retry_after"], (int, str))):
        raise ValueError("fail.retry_after: integer, string or null")
    if "headers" in f and not (isinstance(f["headers"], dict) and all(isinstance(v, str) for v in f["headers"].values())):
        raise ValueError("fail.headers: object of strings")
    if "process" in f and not _bool(f["process"]):
        raise ValueError("fail.process: boolean")
    gt = f.get("grant_type")
    if gt is not None:
        if not isinstance(gt, str):
            raise ValueError("fail.grant_type: string")
        f["grant_type"] = GRANT_ALIASES.get(gt, gt)
    return f


def take_failure(endpoint: str, grant_type: str | None):
    """Pop (one use of) the first queued failure matching this request."""
    with LOCK:
        for f in FAILURES:
            if f["endpoint"] != endpoint:
                continue
            if f.get("grant_type") and f["grant_type"] != grant_type:
                continue
            f["count"] -= 1
            if f["count"] <= 0:
                FAILURES.remove(f)
            STATS["injected_failures"]["total"] += 1
            bump("injected_failures", f["kind"])
            return dict(f)
    return None


def json_response(status, body, headers=None):
    resp = jsonify(body)
    resp.status_code = status
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["Pragma"] = "no-cache"
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


def _retry_after_headers(f):
    ra = f.get("retry_after", 1)
    return {} if ra is None else {"Retry-After": str(ra)}


def failure_response(f) -> Response | None:
    """The canned response for an injected failure, or None when the request
    is to be processed normally (slow, drop with process, comma_scope)."""
    kind = f["kind"]
    if kind == "http_500":
        return Response(f.get("body", "Internal Server Error\n"), 500, mimetype="text/plain")
    if kind == "http_503":
        return Response(f.get("body", "Service Unavailable\n"), 503, _retry_after_headers(f), mimetype="text/plain")
    if kind == "http_429":
        return Response(f.get("body", "Too Many Requests\n"), 429, _retry_after_headers(f), mimetype="text/plain")
    if kind == "invalid_grant":
        return json_response(400, {"error": "invalid_grant",
                                   "error_description": f.get("description", "injected invalid_grant")})
    if kind == "invalid_client":
        return json_response(401, {"error": "invalid_client",
                                   "error_description": f.get("description", "injected invalid_client")},
                             {"WWW-Authenticate": 'Basic realm="tokenvault-test"'})
    if kind == "oauth_error":
        body = {"error": f.get("error", "server_error")}
        if "description" in f:
            body["error_description"] = f["description"]
        return json_response(f.get("status", 400), body)
    if kind == "html":
        status = f.get("status", 200)
        return Response("<!DOCTYPE html>\n<html><head><title>%d</title></head><body>"
                        "<h1>Something went wrong</h1><p>Please try again later.</p></body></html>\n" % status,
                        status, mimetype="text/html")
    if kind == "missing_access_token":
        return json_response(200, {"token_type": "Bearer", "expires_in": 3600,
                                   "scope": setting("default_scope")})
    if kind == "missing_token_type":
        return json_response(200, {"access_token": new_token("at_bogus_"), "expires_in": 3600})
    if kind == "wrong_token_type":
        return json_response(200, {"access_token": new_token("at_bogus_"), "expires_in": 3600,
                                   "token_type": f.get("token_type", "mac")})
    if kind == "error_200":
        body = {"error": f.get("error", "invalid_grant")}
        body["error_description"] = f.get("description", "injected error with HTTP 200")
        return json_response(200, body)
    if kind == "custom":
        body = f.get("body", "")
        if isinstance(body, (dict, list)):
            resp = json_response(f.get("status", 200), body, f.get("headers"))
        else:
            resp = Response(str(body), f.get("status", 200), f.get("headers") or {},
                            content_type=f.get("content_type", "text/plain"))
        return resp
    return None  # slow, drop, comma_scope: processed normally


def pre_failure(endpoint, grant_type):
    """Take a queued failure for this request; sleep its delay (outside the
    lock). Returns (failure or None, canned response or None)."""
    f = take_failure(endpoint, grant_type)
    if f is None:
        return None, None
    delay = f.get("delay", 0) + (f.get("seconds", 2) if f["kind"] == "slow" else 0)
    if delay:
        time.sleep(delay)
    if f["kind"] == "drop" and not f.get("process"):
        request.environ["tv.drop"] = True
        return f, Response("", 500)  # never sent
    return f, failure_response(f)


def post_failure(f, resp: Response) -> Response:
    """Apply a failure that alters a processed response."""
    if f is None:
        return resp
    if f["kind"] == "drop":  # with process: the work is done, the answer lost
        request.environ["tv.drop"] = True
    elif f["kind"] == "comma_scope":
        body = resp.get_json(silent=True)
        if isinstance(body, dict) and isinstance(body.get("scope"), str):
            body["scope"] = ",".join(body["scope"].replace(",", " ").split())
            resp = json_response(resp.status_code, body)
    return resp


# --------------------------------------------------------------------------
# Authlib glue: token generation and storage
# --------------------------------------------------------------------------


def generate_token(grant_type, client, user=None, scope=None, expires_in=None,
                   include_refresh_token=True):
    """Token generator registered as Authlib's "default" generator: builds the
    token response from the current knobs."""
    with LOCK:
        s = copy.deepcopy(SETTINGS)
        granted = client.get_allowed_scope(scope)
        token = {"access_token": new_token("at_"), "token_type": s["token_type"]}
        lifetime = s["access_token_lifetime"]
        if s["include_expires_in"] and lifetime is not None:
            token["expires_in"] = int(lifetime)  # rounded down: never promise more
        if include_refresh_token and s["issue_refresh_tokens"]:
            token["refresh_token"] = new_token("rt_")
        if s["include_scope"]:
            shown = granted if s["response_scope"] is None else s["response_scope"]
            if s["scope_separator"] == ",":
                shown = ",".join(shown.split())
            token["scope"] = shown
        token.update(s["extra_token_fields"])
        STORE.issue_meta[token["access_token"]] = {
            "scope": granted,
            "lifetime": lifetime,
            "refresh_lifetime": s["refresh_token_lifetime"],
        }
        return token


def save_token(token, req):
    """Authlib's save_token: record the issued tokens in their family."""
    with LOCK:
        meta = STORE.issue_meta.pop(token["access_token"], None) or {
            "scope": req.scope, "lifetime": SETTINGS["access_token_lifetime"],
            "refresh_lifetime": SETTINGS["refresh_token_lifetime"]}
        client = req.client
        subject = req.user.id if req.user is not None else client.client_id
        old = req.refresh_token
        if isinstance(old, RefreshToken):
            family = old.family
        else:
            family = STORE.new_family()
        req.tv_family = family
        STORE.add(AccessToken(token["access_token"], client.client_id, subject,
                              meta["scope"], family, meta["lifetime"]))
        if "refresh_token" in token:
            STORE.add(RefreshToken(token["refresh_token"], client.client_id, subject,
                                   meta["scope"], family, meta["refresh_lifetime"]))


def query_client(client_id):
    return CLIENTS.get(client_id)


class AuthorizationCodeGrant(grants.AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ALL_CLIENT_AUTH

    def save_authorization_code(self, code, req):
        data = req.payload.data
        with LOCK:
            STORE.codes[code] = AuthCode(
                code, req.client.client_id, req.payload.redirect_uri, req.scope,
                req.user.id, data.get("code_challenge"), data.get("code_challenge_method"))

    def generate_authorization_code(self):
        return new_token("ac_")

    def query_authorization_code(self, code, client):
        with LOCK:
            ac = STORE.codes.get(code)
            if ac is None or ac.client_id != client.client_id:
                return None
            if ac.used:
                # RFC 6749 section 4.1.2: deny, and revoke what the code gave.
                STATS["code_reuse_detected"] += 1
                if ac.family is not None:
                    STORE.revoke_family(ac.family)
                return None
            if now() > ac.expires_at:
                return None
            return ac

    def delete_authorization_code(self, ac):
        with LOCK:
            ac.used = True  # kept to detect a second use
            ac.family = getattr(self.request, "tv_family", None)

    def authenticate_user(self, ac):
        return User(ac.subject)


class S256CodeChallenge(CodeChallenge):
    """PKCE: only S256, and required for public clients."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]

    def validate_code_challenge(self, grant, redirect_uri):
        req = grant.request
        challenge = req.payload.data.get("code_challenge")
        method = req.payload.data.get("code_challenge_method")
        if not challenge and req.client is not None and req.client.is_public:
            raise InvalidRequestError("PKCE is required for public clients: send code_challenge with S256")
        if challenge and method != "S256":
            raise InvalidRequestError("code_challenge_method must be S256")
        super().validate_code_challenge(grant, redirect_uri)


class RefreshTokenGrant(grants.RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ALL_CLIENT_AUTH

    def authenticate_refresh_token(self, value):
        with LOCK:
            rt = STORE.refresh.get(value)
            if rt is None or rt.revoked or rt.is_expired():
                return None
            if rt.rotated_to is None:
                return rt
            # An already rotated refresh token: a lost response being retried
            # (grace: answer the same pair once) or reuse.
            successor = STORE.refresh.get(rt.rotated_to)
            grace = SETTINGS["refresh_grace_seconds"]
            if (grace > 0 and not rt.replayed and now() - rt.rotated_at <= grace
                    and successor is not None and successor.is_valid()):
                self.tv_replay = rt
                return rt
            STATS["refresh_reuse_detected"] += 1
            if SETTINGS["revoke_family_on_reuse"]:
                STORE.revoke_family(rt.family)
            raise InvalidGrantError("refresh token reuse detected")

    def authenticate_user(self, rt):
        return User(rt.subject)

    def issue_token(self, user, rt):
        scope = self.request.payload.scope or rt.get_scope()
        return self.generate_token(user=user, scope=scope,
                                   include_refresh_token=setting("rotate_refresh_tokens"))

    def revoke_old_credential(self, rt):
        token = self.request.tv_issued
        if "refresh_token" in token:  # rotated
            with LOCK:
                rt.rotated_to = token["refresh_token"]
                rt.rotated_at = now()
                rt.replay_response = dict(token)

    def create_token_response(self):
        replay = getattr(self, "tv_replay", None)
        if replay is None:
            return super().create_token_response()
        with LOCK:
            replay.replayed = True
            STATS["refresh_replayed"] += 1
            body = dict(replay.replay_response)
            at = STORE.access.get(body["access_token"])
            if "expires_in" in body and at is not None and at.expires_at is not None:
                body["expires_in"] = max(0, int(at.expires_at - now()))
        return 200, body, self.TOKEN_RESPONSE_HEADER

    def save_token(self, token):
        self.request.tv_issued = token
        return super().save_token(token)


class ClientCredentialsGrant(grants.ClientCredentialsGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]


class DeviceGrant(DeviceCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ALL_CLIENT_AUTH

    def query_device_credential(self, device_code):
        with LOCK:
            cred = STORE.devices.get(device_code)
            if cred is None or cred["status"] == "consumed":
                raise InvalidGrantError("unknown or already used device_code")
            t = now()
            cred["prev_poll"], cred["last_poll"] = cred.get("last_poll"), t
            cred["polls"] += 1
            after = SETTINGS["device_approve_after_polls"]
            if cred["status"] == "pending" and after is not None and cred["polls"] > after:
                cred["status"] = "approved"
            return cred

    def query_user_grant(self, user_code):
        with LOCK:
            cred = STORE.user_codes.get(user_code)
            if cred is None:
                return None
            if cred["status"] == "approved":
                return User(cred["subject"]), True
            if cred["status"] == "denied":
                return None, False
            return None

    def should_slow_down(self, cred):
        with LOCK:
            if not SETTINGS["device_enforce_interval"] or cred.get("prev_poll") is None:
                return False
            if cred["last_poll"] - cred["prev_poll"] < cred["interval"] - 0.05:
                cred["interval"] += SETTINGS["device_slow_down_increment"]
                return True
            return False

    def create_token_response(self):
        result = super().create_token_response()
        with LOCK:
            self.request.credential["status"] = "consumed"
        return result


class DeviceAuthEndpoint(DeviceAuthorizationEndpoint):
    CLIENT_AUTH_METHODS = ALL_CLIENT_AUTH

    @property
    def EXPIRES_IN(self):  # noqa: N802 (Authlib's name)
        return int(setting("device_code_lifetime"))

    @property
    def INTERVAL(self):  # noqa: N802
        return setting("device_interval")

    def get_verification_uri(self):
        return BASE_URL + "/device"

    def save_device_credential(self, client_id, scope, data):
        with LOCK:
            cred = DeviceCredential(
                client_id=client_id,
                scope=scope,
                device_code=data["device_code"],
                user_code=data["user_code"],
                expires_at=now() + SETTINGS["device_code_lifetime"],
                interval=data["interval"],
                status="pending",
                polls=0,
                subject=SETTINGS["subject"],
            )
            STORE.devices[cred["device_code"]] = cred
            STORE.user_codes[cred["user_code"]] = cred


class Revocation(RevocationEndpoint):
    CLIENT_AUTH_METHODS = ALL_CLIENT_AUTH

    def query_token(self, value, hint):
        # The hint is only a hint (RFC 7009 section 2.1): look everywhere.
        with LOCK:
            return STORE.find(value)

    def revoke_token(self, token, req):
        with LOCK:
            if isinstance(token, RefreshToken):
                # RFC 7009 section 2.1: also invalidate the access tokens of
                # the same grant.
                STORE.revoke_family(token.family)
            else:
                token.revoked = True


class AccessTokenValidator(BearerTokenValidator):
    def authenticate_token(self, value):
        with LOCK:
            return STORE.access.get(value)


# --------------------------------------------------------------------------
# Flask application
# --------------------------------------------------------------------------

app = Flask(__name__)
authz = AuthorizationServer()
authz.init_app(app, query_client=query_client, save_token=save_token)
authz.register_token_generator("default", generate_token)
authz.register_grant(AuthorizationCodeGrant, [S256CodeChallenge(required=True)])
authz.register_grant(RefreshTokenGrant)
authz.register_grant(ClientCredentialsGrant)
authz.register_grant(DeviceGrant)
authz.register_endpoint(Revocation)
authz.register_endpoint(DeviceAuthEndpoint)
require_oauth = ResourceProtector()
require_oauth.register_token_validator(AccessTokenValidator())


def metadata() -> dict:
    doc = {
        "issuer": BASE_URL,
        "authorization_endpoint": BASE_URL + "/authorize",
        "token_endpoint": BASE_URL + "/token",
        "revocation_endpoint": BASE_URL + "/revoke",
        "device_authorization_endpoint": BASE_URL + "/device_authorization",
        "userinfo_endpoint": BASE_URL + "/userinfo",
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token",
                                  "client_credentials", DEVICE_CODE_GRANT_TYPE],
        "token_endpoint_auth_methods_supported": ALL_CLIENT_AUTH,
        "revocation_endpoint_auth_methods_supported": ALL_CLIENT_AUTH,
        "code_challenge_methods_supported": ["S256"],
    }
    for key, value in setting("metadata_overrides").items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


@app.get("/.well-known/oauth-authorization-server")
@app.get("/.well-known/openid-configuration")
def well_known():
    return jsonify(metadata())


@app.route("/authorize", methods=["GET", "POST"])
def authorize():
    with LOCK:
        STATS["authorize_requests"] += 1
        append_log("authorize_log", {"t": now(), "params": request.values.to_dict()})
        subject = SETTINGS["subject"]
        error = SETTINGS["authorize_error"]
        wrong_state = SETTINGS["authorize_wrong_state"]
    user = User(subject)
    try:
        grant = authz.get_consent_grant(end_user=user)
    except OAuth2Error as err:
        # With a validated redirect URI the error is redirected (RFC 6749
        # 4.1.2.1); without one it is shown here.
        return authz.handle_error_response(None, err)
    if error == "access_denied":
        return authz.create_authorization_response(grant_user=None, grant=grant)
    if error:
        params = [("error", error)]
        if request.values.get("state"):
            params.append(("state", request.values["state"]))
        return Response("", 302, {"Location": add_params_to_uri(grant.redirect_uri, params)})
    resp = authz.create_authorization_response(grant_user=user, grant=grant)
    if wrong_state and resp.status_code == 302:
        # Answer with a state the client did not send (a CSRF test).
        parts = urlsplit(resp.headers["Location"])
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "state"]
        query.append(("state", "wrong-" + secrets.token_hex(4)))
        resp.headers["Location"] = urlunsplit(parts._replace(query=urlencode(query)))
    return resp


def _note_token_request(grant_type, f, resp, started):
    """Stats and the token log for one /token request (never token values)."""
    body = resp.get_json(silent=True) if resp.is_json else None
    issued = (f is None or f["kind"] in ("slow", "drop", "comma_scope")) and resp.status_code == 200 \
        and isinstance(body, dict) and "access_token" in body
    with LOCK:
        if issued:
            bump("token_success", "total")
            bump("token_success", grant_type)
            if grant_type == "refresh_token":
                STATS["refresh_success"] += 1
        if isinstance(body, dict) and isinstance(body.get("error"), str) and f is None:
            errors = STATS["token_errors"].setdefault(grant_type, {})
            errors[body["error"]] = errors.get(body["error"], 0) + 1
        headers = {k: ("<redacted>" if k.lower() in ("authorization", "cookie") else v)
                   for k, v in request.headers.items()}
        form = request.form
        append_log("token_log", {
            "t": started,
            "duration": round(now() - started, 4),
            "grant_type": grant_type,
            "client_id": form.get("client_id") or (request.authorization.username
                                                   if request.authorization else None),
            "basic_auth": request.authorization is not None,
            "params": sorted(form.keys()),
            "scope": form.get("scope"),
            "headers": headers,
            "status": None if f and f["kind"] == "drop" and not f.get("process") else resp.status_code,
            "error": body.get("error") if isinstance(body, dict) else None,
            "injected": f["kind"] if f else None,
            "dropped": bool(request.environ.get("tv.drop")),
        })


@app.post("/token")
def token():
    started = now()
    grant_type = request.form.get("grant_type", "")
    with LOCK:
        bump("token_requests", "total")
        bump("token_requests", grant_type)
        if grant_type == "refresh_token":
            STATS["refresh_requests"] += 1
        STATS["in_flight_token_requests"] += 1
        STATS["max_concurrent_token_requests"] = max(
            STATS["max_concurrent_token_requests"], STATS["in_flight_token_requests"])
    try:
        f, resp = pre_failure("token", grant_type)
        if resp is None:
            with LOCK:
                resp = authz.create_token_response()
            resp = post_failure(f, resp)
        _note_token_request(grant_type, f, resp, started)
        return resp
    finally:
        with LOCK:
            STATS["in_flight_token_requests"] -= 1


@app.post("/revoke")
def revoke():
    value = request.form.get("token", "")
    hint = request.form.get("token_type_hint")
    with LOCK:
        found = STORE.find(value) if value else None
        kind = ("refresh_token" if isinstance(found, RefreshToken)
                else "access_token" if isinstance(found, AccessToken) else "unknown")
        bump("revocations", "total")
        bump("revocations", kind)
        bump("revocations_by_hint", hint or "none")
    f, resp = pre_failure("revoke", None)
    if resp is None:
        with LOCK:
            resp = authz.create_endpoint_response("revocation")
        resp = post_failure(f, resp)
    return resp


@app.post("/device_authorization")
def device_authorization():
    with LOCK:
        STATS["device_authorizations"] += 1
    f, resp = pre_failure("device_authorization", None)
    if resp is None:
        with LOCK:
            resp = authz.create_endpoint_response("device_authorization")
        resp = post_failure(f, resp)
    return resp


@app.get("/device")
def device_page():
    """The verification URI. Approves the code when device_approve_on_visit
    is on (a test's BROWSER hook can then approve by opening the URL)."""
    user_code = request.args.get("user_code", "")
    with LOCK:
        cred = STORE.user_codes.get(user_code)
        if cred is not None and SETTINGS["device_approve_on_visit"] and cred["status"] == "pending":
            cred["status"] = "approved"
        status = cred["status"] if cred is not None else None
    text = "Enter the code shown on your device." if status is None else \
        "Code %s: %s." % (user_code, status)
    return Response("<!DOCTYPE html>\n<html><body><p>%s</p></body></html>\n" % text,
                    mimetype="text/html")


@app.route("/userinfo", methods=["GET", "POST"])
@app.route("/api/me", methods=["GET", "POST"])
def userinfo():
    try:
        tok = require_oauth.acquire_token()
    except OAuth2Error as err:
        with LOCK:
            bump("userinfo", "unauthorized")
        status, body, headers = err()
        return json_response(status, dict(body), dict(headers))
    with LOCK:
        bump("userinfo", "ok")
    return jsonify({"sub": tok.subject, "login": tok.subject, "client_id": tok.client_id,
                    "scope": tok.scope})


# -- control and stats -----------------------------------------------------


def _loopback_only():
    try:
        if not ipaddress.ip_address(request.remote_addr or "").is_loopback:
            return json_response(403, {"error": "forbidden"})
    except ValueError:
        return json_response(403, {"error": "forbidden"})
    return None


def _device_targets(value, key):
    """The device credentials named by device_approve / device_deny."""
    if value is True or value == "all":
        return [c for c in STORE.devices.values() if c["status"] == "pending"]
    if isinstance(value, str):
        cred = STORE.user_codes.get(value)
        if cred is None:
            raise ValueError("%s: no such user_code %r" % (key, value))
        return [cred]
    raise ValueError('%s: true, "all" or a user_code' % key)


CONTROL_ACTIONS = {"reset", "reset_settings", "reset_tokens", "reset_all", "clear_failures",
                   "fail", "device_approve", "device_deny", "expire_device_codes",
                   "revoke_all", "expire_access_tokens"}


def control_state():
    return {"settings": copy.deepcopy(SETTINGS), "failures": copy.deepcopy(FAILURES)}


@app.route("/_control", methods=["GET", "POST"])
def control():
    denied = _loopback_only()
    if denied:
        return denied
    if request.method == "GET":
        with LOCK:
            return jsonify(control_state())
    global STATS
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        return json_response(400, {"error": "body must be a JSON object"})
    with LOCK:
        try:
            # Validate everything first: a bad request changes nothing.
            unknown = set(body) - CONTROL_ACTIONS - set(SETTINGS_SPEC)
            if unknown:
                raise ValueError("unknown key(s): %s" % ", ".join(sorted(unknown)))
            for key in set(body) & set(SETTINGS_SPEC):
                check = SETTINGS_SPEC[key][1]
                if not check(body[key]):
                    raise ValueError("%s: expected %s" % (key, check.desc))
            fails = body.get("fail", [])
            if isinstance(fails, dict):
                fails = [fails]
            if not isinstance(fails, list):
                raise ValueError("fail: an object or an array of objects")
            fails = [validate_failure(x) for x in fails]
            resets = body.get("reset_all") is True
            approve = _device_targets(body["device_approve"], "device_approve") \
                if "device_approve" in body else []
            deny = _device_targets(body["device_deny"], "device_deny") \
                if "device_deny" in body else []
        except ValueError as err:
            return json_response(400, {"error": str(err)})

        if resets or body.get("reset") is True:
            STATS = fresh_stats()
            FAILURES.clear()
        if resets or body.get("reset_settings") is True:
            SETTINGS.clear()
            SETTINGS.update({k: copy.deepcopy(v[0]) for k, v in SETTINGS_SPEC.items()})
        if resets or body.get("reset_tokens") is True:
            STORE.clear()
        if body.get("clear_failures") is True:
            FAILURES.clear()
        for key in set(body) & set(SETTINGS_SPEC):
            SETTINGS[key] = copy.deepcopy(body[key])
        FAILURES.extend(fails)
        for cred in approve:
            cred["status"] = "approved"
        for cred in deny:
            cred["status"] = "denied"
        if body.get("expire_device_codes") is True:
            for cred in STORE.devices.values():
                cred["expires_at"] = 0
        if body.get("revoke_all") is True:
            for tok in list(STORE.access.values()) + list(STORE.refresh.values()):
                tok.revoked = True
        if body.get("expire_access_tokens") is True:
            for tok in STORE.access.values():
                tok.expires_at = now() - 1
        return jsonify(control_state())


@app.get("/_stats")
def stats():
    denied = _loopback_only()
    if denied:
        return denied
    with LOCK:
        out = copy.deepcopy(STATS)
        out["valid_access_tokens"] = sum(1 for t in STORE.access.values() if t.is_valid())
        out["valid_refresh_tokens"] = sum(1 for t in STORE.refresh.values() if t.is_valid())
        out["failures_pending"] = sum(f["count"] for f in FAILURES)
        out["device_codes"] = [
            {"user_code": c["user_code"], "client_id": c["client_id"], "status":
             ("expired" if c["status"] == "pending" and c.is_expired() else c["status"]),
             "polls": c["polls"], "interval": c["interval"]}
            for c in STORE.devices.values()
        ]
    return jsonify(out)


# --------------------------------------------------------------------------
# WSGI server plumbing
# --------------------------------------------------------------------------


class DropMiddleware:
    """Closes the connection without an answer when a view set
    environ["tv.drop"]: the client sees its request sent and the response
    lost (EOF before any status line)."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        dropped = False

        def guarded_start_response(status, headers, exc_info=None):
            nonlocal dropped
            if environ.get("tv.drop"):
                dropped = True
                return lambda data: None
            return start_response(status, headers, exc_info)

        result = self.wsgi_app(environ, guarded_start_response)
        if not dropped:
            return result
        if hasattr(result, "close"):
            result.close()
        with LOCK:
            STATS["dropped_connections"] += 1
        handler = environ.get("tv.handler")
        if handler is not None and not handler.quiet:
            sys.stderr.write('%s "%s %s" dropped (injected)\n' % (
                handler.log_date_time_string(), environ.get("REQUEST_METHOD"), environ.get("PATH_INFO")))
        if handler is not None:
            handler.close_connection = True
        sock = environ.get("werkzeug.socket")
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        # A ConnectionError is werkzeug's "client went away": no traceback,
        # no attempt to send a 500.
        raise ConnectionAbortedError("injected drop")


class Handler(WSGIRequestHandler):
    # A buffered wfile (wbufsize = -1) sends the status line, headers and body
    # in one segment on the flush werkzeug does after each write. With the
    # default unbuffered writer the headers and the body go out as two small
    # writes and Nagle's algorithm plus the client's delayed ACK stall every
    # response by ~40 ms. TCP_NODELAY is set as well.
    wbufsize = -1
    disable_nagle_algorithm = True
    quiet = False

    def make_environ(self):
        environ = super().make_environ()
        environ["tv.handler"] = self
        return environ

    def handle_expect_100(self):
        # http.server answers "Expect: 100-continue" into wfile without a
        # flush, which with a buffered wfile would leave the client waiting.
        self.send_response_only(100)
        self.end_headers()
        self.wfile.flush()
        return True

    def run_wsgi(self):
        # Werkzeug would send a second "100 Continue": it was answered above.
        if "Expect" in self.headers:
            del self.headers["Expect"]
        super().run_wsgi()

    def log_request(self, code="-", size="-"):
        # Method and path only: a query string could carry a secret.
        if self.quiet:
            return
        path = getattr(self, "path", "").split("?", 1)[0]
        command = getattr(self, "command", "-")
        sys.stderr.write('%s "%s %s" %s\n' % (self.log_date_time_string(), command, path, code))


def check_metadata():
    """Validate our discovery document with Authlib's RFC 8414 model."""
    AuthorizationServerMetadata(metadata()).validate()


def main(argv=None):
    global BASE_URL
    parser = argparse.ArgumentParser(description="TokenVault test OAuth 2.0 authorization server")
    parser.add_argument("--port", type=int, default=0, help="port (0: an ephemeral one)")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    parser.add_argument("--quiet", action="store_true", help="do not log request lines")
    parser.add_argument("--watch-parent", action="store_true",
                        help="exit when the parent process goes away")
    parser.add_argument("--max-lifetime", type=float, default=None,
                        help="exit after this many seconds (a safety net for tests)")
    args = parser.parse_args(argv)

    if not is_loopback_host(args.host) or args.host == "localhost":
        parser.error("--host must be a loopback IP address (127.0.0.0/8 or ::1)")

    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # Authlib logs issued tokens at DEBUG: keep it above that, always.
    logging.getLogger("authlib").setLevel(logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    Handler.quiet = args.quiet

    server = make_server(args.host, args.port, DropMiddleware(app), threaded=True,
                         request_handler=Handler)
    host = args.host if ":" not in args.host else "[%s]" % args.host
    BASE_URL = "http://%s:%d" % (host, server.server_address[1])
    check_metadata()

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def watchdog():
        parent = os.getppid()
        deadline = None if args.max_lifetime is None else now() + args.max_lifetime
        while True:
            time.sleep(0.5)
            if (args.watch_parent and os.getppid() != parent) or (deadline and now() > deadline):
                os.kill(os.getpid(), signal.SIGTERM)
                return

    if args.watch_parent or args.max_lifetime is not None:
        threading.Thread(target=watchdog, daemon=True).start()

    sys.stdout.write("READY %s\n" % BASE_URL)
    sys.stdout.flush()
    log.info("listening on %s", BASE_URL)
    try:
        server.serve_forever(poll_interval=0.2)
    except SystemExit:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
