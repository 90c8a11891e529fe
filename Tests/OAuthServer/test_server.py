#!/usr/bin/env python3
"""Self-test of the test OAuth server, standard library only.

Starts server.py as a subprocess (with the interpreter running this file,
normally .venv-oauth/bin/python), then exercises discovery, the grants,
rotation and reuse detection, revocation, the device flow and some injected
failures. Run:

    "$(scripts/oauth-server-venv.sh | tail -n1)" Tests/OAuthServer/test_server.py

Ends with a line "selftest: N passed, N failed". Also runs under pytest.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = None  # subprocess.Popen
BASE = ""
REDIRECT = "http://127.0.0.1:54321/callback"  # a port that was never registered


def setUpModule():  # noqa: N802 (unittest's name)
    global SERVER, BASE
    SERVER = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "server.py"), "--port", "0", "--quiet",
         "--watch-parent", "--max-lifetime", "300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = SERVER.stdout.readline().strip()
    if not line.startswith("READY http://127.0.0.1:"):
        SERVER.kill()
        raise RuntimeError("server did not start: %r %s" % (line, SERVER.stderr.read()))
    BASE = line.split(" ", 1)[1]
    # Drain stderr so the server never blocks on a full pipe.
    threading.Thread(target=SERVER.stderr.read, daemon=True).start()


def tearDownModule():  # noqa: N802
    if SERVER is not None:
        SERVER.terminate()
        try:
            assert SERVER.wait(timeout=5) == 0, "server did not exit 0 on SIGTERM"
        finally:
            if SERVER.poll() is None:
                SERVER.kill()


# -- tiny HTTP helpers ------------------------------------------------------


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def call(method, path, form=None, body_json=None, headers=None, basic=None):
    """Returns (status, headers, parsed JSON or text)."""
    data = None
    hdrs = dict(headers or {})
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
        hdrs["Content-Type"] = "application/x-www-form-urlencoded"
    if body_json is not None:
        data = json.dumps(body_json).encode()
        hdrs["Content-Type"] = "application/json"
    if basic:
        hdrs["Authorization"] = "Basic " + base64.b64encode(("%s:%s" % basic).encode()).decode()
    req = urllib.request.Request(BASE + path, data=data, headers=hdrs, method=method)
    try:
        resp = OPENER.open(req, timeout=10)
    except urllib.error.HTTPError as err:
        resp = err
    raw = resp.read().decode()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw
    return resp.status, resp.headers, parsed


def control(**body):
    status, _, out = call("POST", "/_control", body_json=body)
    assert status == 200, out
    return out


def stats():
    return call("GET", "/_stats")[2]


def token(form, basic=None):
    return call("POST", "/token", form=form, basic=basic)


def userinfo(access_token):
    return call("GET", "/userinfo", headers={"Authorization": "Bearer " + access_token})


def pkce_pair():
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def authorize(client_id="public-cli", challenge=None, state="st-123", redirect_uri=REDIRECT, **extra):
    params = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
              "state": state, "scope": "read write", **extra}
    if challenge:
        params.update(code_challenge=challenge, code_challenge_method="S256")
    status, headers, _ = call("GET", "/authorize?" + urllib.parse.urlencode(params))
    return status, headers.get("Location")


def login_public():
    """Authorization code + PKCE for public-cli; returns the token response."""
    verifier, challenge = pkce_pair()
    status, location = authorize(challenge=challenge)
    assert status == 302, status
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
    status, _, tok = token({"grant_type": "authorization_code", "code": query["code"],
                            "redirect_uri": REDIRECT, "client_id": "public-cli",
                            "code_verifier": verifier})
    assert status == 200, tok
    return tok


class Base(unittest.TestCase):
    def setUp(self):
        control(reset_all=True)


class TestDiscovery(Base):
    def test_metadata(self):
        for path in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
            status, _, doc = call("GET", path)
            self.assertEqual(status, 200)
            self.assertEqual(doc["issuer"], BASE)
            for key, suffix in [("authorization_endpoint", "/authorize"), ("token_endpoint", "/token"),
                                ("revocation_endpoint", "/revoke"),
                                ("device_authorization_endpoint", "/device_authorization")]:
                self.assertEqual(doc[key], BASE + suffix)
            self.assertEqual(doc["code_challenge_methods_supported"], ["S256"])

    def test_metadata_override(self):
        control(metadata_overrides={"revocation_endpoint": None})
        doc = call("GET", "/.well-known/oauth-authorization-server")[2]
        self.assertNotIn("revocation_endpoint", doc)

    def test_control_rejects_unknown_keys(self):
        status, _, out = call("POST", "/_control", body_json={"acces_token_lifetime": 2})
        self.assertEqual(status, 400)
        self.assertIn("acces_token_lifetime", out["error"])
        status, _, out = call("POST", "/_control", body_json={"access_token_lifetime": "2"})
        self.assertEqual(status, 400)


class TestClientCredentials(Base):
    def test_basic_auth(self):
        status, headers, tok = token({"grant_type": "client_credentials"}, basic=("cc-cli", "cc-secret"))
        self.assertEqual(status, 200, tok)
        self.assertTrue(tok["access_token"].startswith("at_"))
        self.assertEqual(tok["token_type"], "Bearer")
        self.assertEqual(tok["expires_in"], 3600)
        self.assertNotIn("refresh_token", tok)
        self.assertEqual(headers["Cache-Control"], "no-store")
        status, _, me = userinfo(tok["access_token"])
        self.assertEqual((status, me["sub"]), (200, "cc-cli"))

    def test_post_auth_and_bad_secret(self):
        status, _, tok = token({"grant_type": "client_credentials", "client_id": "post-cli",
                                "client_secret": "post-secret"})
        self.assertEqual(status, 200, tok)
        status, _, err = token({"grant_type": "client_credentials"}, basic=("cc-cli", "wrong"))
        self.assertEqual((status, err["error"]), (401, "invalid_client"))
        # public clients cannot use client_credentials
        status, _, err = token({"grant_type": "client_credentials", "client_id": "public-cli"})
        self.assertEqual(err["error"], "invalid_client")
        s = stats()
        self.assertEqual(s["token_requests"]["client_credentials"], 3)
        self.assertEqual(s["token_success"]["client_credentials"], 1)


class TestAuthorizationCode(Base):
    def test_pkce_public_client(self):
        verifier, challenge = pkce_pair()
        status, location = authorize(challenge=challenge, state="xyz-42")
        self.assertEqual(status, 302)
        parts = urllib.parse.urlsplit(location)
        self.assertEqual((parts.scheme, parts.netloc, parts.path), ("http", "127.0.0.1:54321", "/callback"))
        query = dict(urllib.parse.parse_qsl(parts.query))
        self.assertEqual(query["state"], "xyz-42")
        form = {"grant_type": "authorization_code", "code": query["code"], "redirect_uri": REDIRECT,
                "client_id": "public-cli"}
        # wrong verifier
        status, _, err = token({**form, "code_verifier": pkce_pair()[0]})
        self.assertEqual((status, err["error"]), (400, "invalid_grant"))
        # right verifier
        status, _, tok = token({**form, "code_verifier": verifier})
        self.assertEqual(status, 200, tok)
        self.assertTrue(tok["refresh_token"].startswith("rt_"))
        self.assertEqual(tok["scope"], "read write")
        self.assertEqual(userinfo(tok["access_token"])[2]["sub"], "tv-test-user")
        # a code works once; reuse also revokes what it gave
        status, _, err = token({**form, "code_verifier": verifier})
        self.assertEqual(err["error"], "invalid_grant")
        self.assertEqual(userinfo(tok["access_token"])[0], 401)
        self.assertEqual(stats()["code_reuse_detected"], 1)

    def test_pkce_required_and_s256_only(self):
        status, location = authorize()
        self.assertEqual(status, 302)
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
        self.assertEqual((query["error"], query["state"]), ("invalid_request", "st-123"))
        status, location = authorize(code_challenge="a" * 43, code_challenge_method="plain")
        self.assertIn("error=invalid_request", location)

    def test_redirect_uri_checks(self):
        _, challenge = pkce_pair()
        # any loopback port, also IPv6
        self.assertEqual(authorize(challenge=challenge, redirect_uri="http://[::1]:8080/callback")[0], 302)
        # other path or host: not redirected
        status, location = authorize(challenge=challenge, redirect_uri="http://127.0.0.1:5/other")
        self.assertEqual((status, location), (400, None))
        status, location = authorize(challenge=challenge, redirect_uri="http://example.com:5/callback")
        self.assertEqual(status, 400)

    def test_access_denied_knob(self):
        control(authorize_error="access_denied")
        status, location = authorize(challenge=pkce_pair()[1], state="s1")
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
        self.assertEqual((query["error"], query["state"]), ("access_denied", "s1"))
        self.assertNotIn("code", query)

    def test_confidential_client_basic(self):
        status, location = authorize(client_id="basic-cli")
        code = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))["code"]
        status, _, tok = token({"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT},
                               basic=("basic-cli", "basic-secret"))
        self.assertEqual(status, 200, tok)


class TestRefresh(Base):
    def test_rotation_and_reuse_detection(self):
        control(refresh_grace_seconds=0)
        tok = login_public()
        status, _, new = token({"grant_type": "refresh_token", "refresh_token": tok["refresh_token"],
                                "client_id": "public-cli"})
        self.assertEqual(status, 200, new)
        self.assertNotEqual(new["refresh_token"], tok["refresh_token"])
        self.assertEqual(stats()["refresh_reuse_detected"], 0)
        # the old one again: reuse, and the whole family is revoked
        status, _, err = token({"grant_type": "refresh_token", "refresh_token": tok["refresh_token"],
                                "client_id": "public-cli"})
        self.assertEqual((status, err["error"]), (400, "invalid_grant"))
        s = stats()
        self.assertEqual((s["refresh_reuse_detected"], s["refresh_requests"], s["refresh_success"]), (1, 2, 1))
        self.assertEqual(userinfo(new["access_token"])[0], 401)
        status, _, err = token({"grant_type": "refresh_token", "refresh_token": new["refresh_token"],
                                "client_id": "public-cli"})
        self.assertEqual(err["error"], "invalid_grant")

    def test_no_rotation_short_lifetime_no_expires_in(self):
        control(rotate_refresh_tokens=False, access_token_lifetime=2, include_expires_in=False,
                scope_separator=",")
        tok = login_public()
        self.assertNotIn("expires_in", tok)
        self.assertEqual(tok["scope"], "read,write")
        self.assertEqual(userinfo(tok["access_token"])[0], 200)
        time.sleep(2.1)
        status, headers, _ = userinfo(tok["access_token"])
        self.assertEqual(status, 401)
        self.assertIn("invalid_token", headers["WWW-Authenticate"])
        for _ in range(2):  # the same refresh token keeps working
            status, _, new = token({"grant_type": "refresh_token", "refresh_token": tok["refresh_token"],
                                    "client_id": "public-cli"})
            self.assertEqual(status, 200, new)
            self.assertNotIn("refresh_token", new)
        self.assertEqual(stats()["valid_access_tokens"], 2)


class TestRevocation(Base):
    def test_revoke_refresh_token_revokes_access_tokens(self):
        tok = login_public()
        status, _, _ = call("POST", "/revoke", form={"token": tok["refresh_token"],
                                                      "token_type_hint": "refresh_token",
                                                      "client_id": "public-cli"})
        self.assertEqual(status, 200)
        self.assertEqual(userinfo(tok["access_token"])[0], 401)
        status, _, err = token({"grant_type": "refresh_token", "refresh_token": tok["refresh_token"],
                                "client_id": "public-cli"})
        self.assertEqual(err["error"], "invalid_grant")
        # unknown tokens are fine (RFC 7009 2.2)
        self.assertEqual(call("POST", "/revoke", form={"token": "nope", "client_id": "public-cli"})[0], 200)
        s = stats()
        self.assertEqual(s["revocations"], {"total": 2, "refresh_token": 1, "access_token": 0, "unknown": 1})
        self.assertEqual(s["revocations_by_hint"]["refresh_token"], 1)
        self.assertEqual(s["valid_access_tokens"], 0)

    def test_revoke_access_token_only(self):
        status, _, tok = token({"grant_type": "client_credentials"}, basic=("cc-cli", "cc-secret"))
        self.assertEqual(call("POST", "/revoke", form={"token": tok["access_token"],
                                                        "token_type_hint": "access_token"},
                              basic=("cc-cli", "cc-secret"))[0], 200)
        self.assertEqual(userinfo(tok["access_token"])[0], 401)
        self.assertEqual(stats()["revocations"]["access_token"], 1)


class TestDeviceFlow(Base):
    def start(self):
        status, _, dev = call("POST", "/device_authorization", form={"client_id": "public-cli", "scope": "read"})
        self.assertEqual(status, 200, dev)
        for key in ("device_code", "user_code", "verification_uri", "verification_uri_complete",
                    "expires_in", "interval"):
            self.assertIn(key, dev)
        self.assertEqual(dev["verification_uri"], BASE + "/device")
        return dev

    def poll(self, dev):
        return token({"grant_type": "urn:ietf:params:oauth:grant-type:device_code",
                      "device_code": dev["device_code"], "client_id": "public-cli"})

    def test_pending_slow_down_approve(self):
        dev = self.start()
        self.assertEqual(dev["interval"], 1)
        self.assertEqual(self.poll(dev)[2]["error"], "authorization_pending")
        self.assertEqual(self.poll(dev)[2]["error"], "slow_down")  # polled at once
        control(device_approve=dev["user_code"])
        status, _, tok = self.poll(dev)
        self.assertEqual(status, 200, tok)
        self.assertEqual(tok["scope"], "read")
        self.assertEqual(self.poll(dev)[2]["error"], "invalid_grant")  # used up
        s = stats()
        self.assertEqual(s["token_errors"]["urn:ietf:params:oauth:grant-type:device_code"],
                         {"authorization_pending": 1, "slow_down": 1, "invalid_grant": 1})
        self.assertEqual(s["device_codes"][0]["status"], "consumed")

    def test_deny_and_expire(self):
        control(device_enforce_interval=False)
        dev = self.start()
        control(device_deny=True)
        self.assertEqual(self.poll(dev)[2]["error"], "access_denied")
        dev = self.start()
        control(expire_device_codes=True)
        self.assertEqual(self.poll(dev)[2]["error"], "expired_token")


class TestInjectedFailures(Base):
    def cc(self):
        return token({"grant_type": "client_credentials"}, basic=("cc-cli", "cc-secret"))

    def test_503_retry_after_then_ok(self):
        control(fail={"kind": "http_503", "retry_after": 2, "count": 2})
        for _ in range(2):
            status, headers, _ = self.cc()
            self.assertEqual((status, headers["Retry-After"]), (503, "2"))
        self.assertEqual(self.cc()[0], 200)
        s = stats()
        self.assertEqual((s["injected_failures"]["http_503"], s["token_success"]["total"]), (2, 1))

    def test_grant_filter_and_canned_bodies(self):
        control(fail=[{"kind": "html", "status": 502, "grant_type": "refresh_token"},
                      {"kind": "error_200", "error": "bad_refresh_token"},
                      {"kind": "missing_access_token"},
                      {"kind": "comma_scope"}])
        status, _, body = self.cc()  # the html one waits for a refresh
        self.assertEqual((status, body["error"]), (200, "bad_refresh_token"))
        status, _, body = self.cc()
        self.assertEqual(status, 200)
        self.assertNotIn("access_token", body)
        self.assertEqual(self.cc()[2]["scope"], "read,write")
        status, headers, body = token({"grant_type": "refresh_token", "refresh_token": "rt_x",
                                       "client_id": "public-cli"})
        self.assertEqual(status, 502)
        self.assertTrue(headers["Content-Type"].startswith("text/html"))

    def test_drop(self):
        control(fail={"kind": "drop"})
        with self.assertRaises((http.client.RemoteDisconnected, ConnectionError, urllib.error.URLError)):
            self.cc()
        self.assertEqual(self.cc()[0], 200)
        s = stats()
        self.assertEqual((s["dropped_connections"], s["token_success"]["total"]), (1, 1))

    def test_drop_after_refresh_then_replay(self):
        tok = login_public()
        control(fail={"kind": "drop", "process": True, "grant_type": "refresh_token"})
        form = {"grant_type": "refresh_token", "refresh_token": tok["refresh_token"], "client_id": "public-cli"}
        with self.assertRaises((http.client.RemoteDisconnected, ConnectionError, urllib.error.URLError)):
            token(form)
        status, _, new = token(form)  # the retry with the same (rotated) token
        self.assertEqual(status, 200, new)
        s = stats()
        self.assertEqual((s["refresh_replayed"], s["refresh_reuse_detected"]), (1, 0))
        # the replayed pair is the one that was lost, and it works
        self.assertEqual(userinfo(new["access_token"])[0], 200)
        status, _, newer = token({**form, "refresh_token": new["refresh_token"]})
        self.assertEqual(status, 200, newer)
        # only once: a third use of the first token is reuse
        self.assertEqual(token(form)[2]["error"], "invalid_grant")
        self.assertEqual(stats()["refresh_reuse_detected"], 1)

    def test_slow_is_concurrent(self):
        control(fail={"kind": "slow", "seconds": 1})
        result = {}
        t = threading.Thread(target=lambda: result.update(r=self.cc()))
        t.start()
        time.sleep(0.2)
        started = time.monotonic()
        self.assertEqual(call("GET", "/.well-known/oauth-authorization-server")[0], 200)
        self.assertLess(time.monotonic() - started, 0.5)  # not blocked by the slow one
        t.join()
        self.assertEqual(result["r"][0], 200)


class TestLatency(Base):
    def test_no_nagle_stall(self):
        # A guard against the ~40 ms Nagle/delayed-ACK stall (the server
        # writes each response in one segment: wbufsize = -1, TCP_NODELAY).
        # A token request on loopback takes a few milliseconds.
        times = []
        for _ in range(15):
            started = time.monotonic()
            self.assertEqual(token({"grant_type": "client_credentials"}, basic=("cc-cli", "cc-secret"))[0], 200)
            times.append(time.monotonic() - started)
        times.sort()
        self.assertLess(times[len(times) // 2], 0.03, times)


if __name__ == "__main__":
    started = time.monotonic()
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    passed = result.testsRun - failed - len(result.skipped)
    print("selftest took %.1f s" % (time.monotonic() - started))
    skipped = ", %d skipped" % len(result.skipped) if result.skipped else ""
    print("selftest: %d passed, %d failed%s" % (passed, failed, skipped))
    sys.exit(1 if failed else 0)
