@preconcurrency import Glibc
import Foundation
import Testing

/// `vaultctl login` against the test OAuth server (PRODUCT.md section 4,
/// issue #6): the loopback redirect driven by the test as a browser would,
/// the device grant through each of its answers, client credentials with
/// re-fetch before expiry, and the defined outcomes (locked, a second login,
/// Ctrl-C, timeout).
extension EndToEnd {
    @Suite struct LoginTests {
        let server: SharedOAuthServer
        /// The device grant's URN, as the server's stats name it.
        static let deviceGrant = "urn:ietf:params:oauth:grant-type:device_code"

        init() throws {
            server = try SharedOAuthServer.running()
            try server.control(["reset_all": true])
        }

        // MARK: - Helpers

        /// A vault whose config has `test` (discovery from the test server,
        /// the public PKCE client, default mode `always`) and `cc` (explicit
        /// token endpoint, client credentials), with its daemon started.
        func startVault() throws -> DaemonHarness {
            let h = try DaemonHarness()
            try h.writeConfig("""
                {"store": "sqlite", "providers": {
                  "test": {"issuer": "\(server.base)", "client_id": "public-cli", "default_mode": "always"},
                  "cc": {"token_endpoint": "\(server.base)/token", "grant": "client_credentials",
                         "client_id": "cc-cli", "client_auth": "client_secret_basic"}}}
                """)
            try h.start()
            return h
        }

        /// Checks that no token, refresh token or code the server issues
        /// (`at_…`, `rt_…`, `ac_…`) is in `text`.
        static func expectNoServerSecrets(_ text: String, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
            let pattern = try! Regex("(at|rt|ac)_[A-Za-z0-9_-]{16,}")
            #expect(text.firstMatch(of: pattern) == nil, "\(what) contains a token or code of the server", sourceLocation: sourceLocation)
        }

        /// Waits (at most `within`) until nothing listens on 127.0.0.1:`port`.
        /// The daemon closes the listener as the login thread ends, which may
        /// be a moment after the waiting vaultctl heard the outcome.
        static func expectPortCloses(_ port: Int, within: Duration = .seconds(1)) throws {
            try waitFor("the loopback port \(port) to close", timeout: within) { !LoopbackHTTP.isListening(port: port) }
        }

        /// Checks the daemon log, then stops the daemon and removes the vault.
        static func finish(_ h: DaemonHarness, sourceLocation: SourceLocation = #_sourceLocation) {
            expectNoServerSecrets(h.daemonLog, "the daemon log", sourceLocation: sourceLocation)
            h.finish(sourceLocation: sourceLocation)
        }

        /// A login waiting for its redirect, as `vaultctl` printed it.
        struct PendingLogin {
            let command: DaemonHarness.BackgroundCommand
            let authorizationURL: String
            /// Its query items, decoded.
            let query: [String: String]
            let redirectPort: Int
        }

        /// Starts `vaultctl login ARGS --no-browser` and reads the
        /// authorization URL from its standard error.
        func startLogin(_ h: DaemonHarness, _ arguments: [String] = ["test"], sourceLocation: SourceLocation = #_sourceLocation) throws -> PendingLogin {
            let c = try h.spawnVaultctl(["login"] + arguments + ["--no-browser"])
            try c.waitForStderr("Waiting for the redirect")
            let line = try #require(c.stderr.split(separator: "\n").first { $0.contains("/authorize?") },
                                    "vaultctl printed the authorization URL: \(c.stderr)", sourceLocation: sourceLocation)
            let url = line.trimmingCharacters(in: .whitespaces)
            let query = Self.formQuery(url)
            let redirect = try #require(query["redirect_uri"].flatMap { URLComponents(string: $0) }, "redirect_uri in \(url)", sourceLocation: sourceLocation)
            #expect(redirect.scheme == "http" && redirect.host == "127.0.0.1" && redirect.path == "/callback",
                    "the redirect URI is http://127.0.0.1:PORT/callback (RFC 8252 section 7.3): \(redirect)", sourceLocation: sourceLocation)
            let port = try #require(redirect.port, "the redirect URI has a port", sourceLocation: sourceLocation)
            return PendingLogin(command: c, authorizationURL: url, query: query, redirectPort: port)
        }

        /// Asks the server's /authorize as a browser would, without following
        /// the redirect, and checks that it points at the login's listener.
        func authorize(_ login: PendingLogin, sourceLocation: SourceLocation = #_sourceLocation) throws -> URLComponents {
            let answer = try LoopbackHTTP.request("GET", login.authorizationURL)
            try #require(answer.status == 302, "/authorize redirects: HTTP \(answer.status) \(answer.body)", sourceLocation: sourceLocation)
            let location = try #require(answer.headers["location"].flatMap { URLComponents(string: $0) }, "a Location header", sourceLocation: sourceLocation)
            #expect(location.host == "127.0.0.1" && location.port == login.redirectPort && location.path == "/callback",
                    "Location points at the loopback listener: \(location)", sourceLocation: sourceLocation)
            return location
        }

        /// Runs a whole loopback login and returns vaultctl's result.
        func login(_ h: DaemonHarness, sourceLocation: SourceLocation = #_sourceLocation) throws -> CommandResult {
            let pending = try startLogin(h, sourceLocation: sourceLocation)
            let location = try authorize(pending, sourceLocation: sourceLocation)
            let page = try LoopbackHTTP.request("GET", location.string!)
            #expect(page.status == 200 && page.body.contains("Logged in"), "the listener's page: \(page.status) \(page.body)", sourceLocation: sourceLocation)
            return try h.wait(for: pending.command)
        }

        /// `vaultctl token PROVIDER`, remembered as a secret; nil unless it exits 0.
        func token(_ h: DaemonHarness, _ provider: String) throws -> String? {
            let r = try h.vaultctl(["token", provider])
            guard r.status == 0 else { return nil }
            let t = r.stdout.trimmingCharacters(in: .newlines)
            h.remember(t)
            return t
        }

        // MARK: - Authorization code over the loopback redirect

        @Test func loopback_whenTheBrowserFollowsTheRedirect_storesTokensInTheProvidersDefaultMode() throws {
            let h = try startVault()
            defer { Self.finish(h) }

            let pending = try startLogin(h)
            // PKCE S256 and a state of at least 16 random bytes (RFC 7636 section 4, RFC 6749 section 10.12).
            #expect(pending.query["response_type"] == "code")
            #expect(pending.query["client_id"] == "public-cli")
            #expect(pending.query["code_challenge_method"] == "S256")
            #expect(pending.query["code_challenge"]?.count == 43, "an S256 challenge is 43 base64url characters: \(pending.query)")
            let state = try #require(pending.query["state"])
            let stateBytes = try #require(Data(base64Encoded: Self.base64(fromBase64URL: state)), "state is base64url: \(state)")
            #expect(stateBytes.count >= 16, "state carries at least 16 bytes: \(state)")

            // Anything but GET /callback gets 404 and leaves the login waiting.
            let favicon = try LoopbackHTTP.request("GET", "http://127.0.0.1:\(pending.redirectPort)/favicon.ico")
            #expect(favicon.status == 404, "GET /favicon.ico: \(favicon.status)")
            #expect(pending.command.process.isRunning, "the login still waits after the favicon request")

            let location = try authorize(pending)
            let query = Self.formQuery(location.string!)
            #expect(query["state"] == state)
            let code = try #require(query["code"])
            h.remember(code)
            let page = try LoopbackHTTP.request("GET", location.string!)
            #expect(page.status == 200 && page.body.contains("Logged in"), "\(page.status) \(page.body)")

            let r = try h.wait(for: pending.command)
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("logged in: test/default (always)"), "\(r.stdout)")
            // One redirect only: the listener is gone once the login is over.
            try Self.expectPortCloses(pending.redirectPort)

            let items = try h.listJSON()
            #expect(items.count == 1)
            #expect(items.first?["provider"] as? String == "test")
            #expect(items.first?["mode"] as? String == "always", "the provider's default_mode: \(items)")
            #expect(items.first?["state"] as? String == "valid")
            let access = try #require(try token(h, "test"))
            #expect(try server.accepts(access), "the stored access token is the server's")
            for text in [r.stdout, r.stderr] {
                #expect(!text.contains(access) && !text.contains(code))
                Self.expectNoServerSecrets(text, "vaultctl login's output")
            }

            let stats = try server.stats()
            #expect(SharedOAuthServer.count(stats, "token_success", "authorization_code") == 1, "\(stats["token_success"] ?? "")")
            #expect(SharedOAuthServer.count(stats, "code_reuse_detected") == 0)
        }

        @Test func loopback_whenTheRedirectCarriesAWrongState_exits77AndStoresNothing() throws {
            let h = try startVault()
            defer { Self.finish(h) }
            try server.control(["authorize_wrong_state": true])

            let pending = try startLogin(h)
            let location = try authorize(pending)
            let state = Self.formQuery(location.string!)["state"]
            #expect(state != nil && state != pending.query["state"], "the server sent another state: \(location)")
            let page = try LoopbackHTTP.request("GET", location.string!)
            #expect(page.status == 400, "\(page.status) \(page.body)")

            let r = try h.wait(for: pending.command)
            #expect(r.status == 77, "a wrong state is denied: \(r)")
            #expect(r.stderr.contains("state"), "the message says why: \(r.stderr)")
            #expect(try h.listJSON().isEmpty, "nothing stored")
            #expect(SharedOAuthServer.count(try server.stats(), "token_requests", "total") == 0, "the code is never exchanged")
            try Self.expectPortCloses(pending.redirectPort)
        }

        @Test func loopback_whenTheProviderRedirectsWithAccessDenied_exits77AndStoresNothing() throws {
            let h = try startVault()
            defer { Self.finish(h) }
            try server.control(["authorize_error": "access_denied"])

            let pending = try startLogin(h)
            let location = try authorize(pending)
            #expect(Self.formQuery(location.string!)["error"] == "access_denied", "\(location)")
            let page = try LoopbackHTTP.request("GET", location.string!)
            #expect(page.body.contains("access_denied"), "the page names the provider's error: \(page.body)")

            let r = try h.wait(for: pending.command)
            #expect(r.status == 77, "\(r)")
            #expect(r.stderr.contains("access_denied"), "\(r.stderr)")
            #expect(try h.listJSON().isEmpty, "nothing stored")
            #expect(SharedOAuthServer.count(try server.stats(), "token_requests", "total") == 0)
        }

        @Test func loopback_whenNoRedirectComesBeforeTheTimeout_exits75AndClosesThePort() throws {
            let h = try startVault()
            defer { Self.finish(h) }

            let started = ContinuousClock.now
            let pending = try startLogin(h, ["test", "--timeout", "2"])
            #expect(LoopbackHTTP.isListening(port: pending.redirectPort))
            let r = try h.wait(for: pending.command, timeout: .seconds(10))
            let elapsed = ContinuousClock.now - started
            #expect(r.status == 75, "a login that times out is a temporary failure: \(r)")
            #expect(r.stderr.contains("timed out"), "\(r.stderr)")
            #expect(elapsed >= .seconds(2) && elapsed < .seconds(5), "it waited about the 2 s asked for: \(elapsed)")
            try Self.expectPortCloses(pending.redirectPort)
            #expect(try h.listJSON().isEmpty)
        }

        // MARK: - The defined outcomes

        @Test func login_whileTheVaultIsLockedForTheMode_exits4AtOnceAndChangesNothing() throws {
            let h = try startVault()
            defer { Self.finish(h) }
            let passphrase = try h.newPassphraseFile("pass")
            #expect(try h.vaultctl(["init", "--passphrase-file", passphrase]).status == 0)
            #expect(try h.vaultctl(["lock"]).status == 0)

            let started = ContinuousClock.now
            let r = try h.vaultctl(["login", "test", "--mode", "when-unlocked", "--no-browser", "--timeout", "60"])
            #expect(r.status == 4, "\(r)")
            #expect(ContinuousClock.now - started < .seconds(3), "refused at once, not after the timeout")
            #expect(r.stderr.contains("unlock"), "the message says what to do: \(r.stderr)")
            #expect(!r.stderr.contains("/authorize"), "no URL was offered")
            #expect(try h.listJSON().isEmpty, "vault unchanged")
            #expect(try h.statusJSON()["lock_state"] as? String == "locked")
            let stats = try server.stats()
            #expect(SharedOAuthServer.count(stats, "token_requests", "total") == 0 && SharedOAuthServer.count(stats, "device_authorizations") == 0)
        }

        @Test func login_whileAnotherLoginOfTheSameAccountWaits_exits1AndTheFirstStillCompletes() throws {
            let h = try startVault()
            defer { Self.finish(h) }

            let first = try startLogin(h)
            let second = try h.vaultctl(["login", "test", "--no-browser", "--timeout", "60"])
            #expect(second.status == 1, "\(second)")
            #expect(second.stderr.contains("already waiting"), "a clear message: \(second.stderr)")

            let location = try authorize(first)
            #expect(try LoopbackHTTP.request("GET", location.string!).status == 200)
            let r = try h.wait(for: first.command)
            #expect(r.status == 0, "the first login completes: \(r)")
            #expect(try h.listJSON().count == 1)
            #expect(try token(h, "test") != nil)
        }

        @Test func login_whenVaultctlGetsSIGINT_daemonCancelsClosesThePortAndANewLoginWorks() throws {
            let h = try startVault()
            defer { Self.finish(h) }

            let pending = try startLogin(h)
            #expect(LoopbackHTTP.isListening(port: pending.redirectPort))
            // After printing the URL vaultctl sends login_wait without sleeping: once it
            // sleeps, it is waiting for the daemon's answer.
            try waitFor("vaultctl to wait for the login's outcome") { Self.processState(pending.command.pid) == "S" }
            kill(pending.command.pid, SIGINT)
            let r = try h.wait(for: pending.command, timeout: .seconds(5))
            #expect(r.status == 128 + SIGINT, "vaultctl dies of SIGINT: \(r)")
            // The daemon looks at the waiting connection every 250 ms, the listener every 250 ms.
            try Self.expectPortCloses(pending.redirectPort, within: .seconds(1))
            #expect(h.daemonLog.contains("cancelled"), "the daemon logs the cancel: \(h.daemonLog)")
            #expect(try h.listJSON().isEmpty, "nothing stored")

            let again = try login(h)
            #expect(again.status == 0, "a new login works after the cancel: \(again)")
            #expect(try h.listJSON().count == 1)
        }

        // MARK: - Device authorization grant

        /// Starts `vaultctl login test --device` and waits until it shows the code.
        func startDeviceLogin(_ h: DaemonHarness) throws -> (DaemonHarness.BackgroundCommand, userCode: String) {
            let c = try h.spawnVaultctl(["login", "test", "--device", "--no-browser"])
            try c.waitForStderr("Waiting for approval")
            let codes = try server.stats()["device_codes"] as? [[String: Any]] ?? []
            let userCode = try #require(codes.first?["user_code"] as? String, "the server has the device code")
            #expect(c.stderr.contains(userCode), "vaultctl shows the user code: \(c.stderr)")
            #expect(c.stderr.contains(server.base + "/device"), "and the verification URI: \(c.stderr)")
            return (c, userCode)
        }

        @Test func device_whenPendingThenApproved_pollsAtTheIntervalAndStoresTokens() throws {
            let h = try startVault()
            defer { Self.finish(h) }
            // device_interval 1 s, enforced: a poll sooner than that would get slow_down.
            try server.control(["device_interval": 1, "device_enforce_interval": true, "device_approve_after_polls": 1])

            let (c, _) = try startDeviceLogin(h)
            let r = try h.wait(for: c, timeout: .seconds(15))
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("logged in: test/default (always)"), "\(r.stdout)")
            Self.expectNoServerSecrets(r.stdout + r.stderr, "vaultctl login --device's output")

            let stats = try server.stats()
            let errors = (stats["token_errors"] as? [String: Any])?[Self.deviceGrant] as? [String: Int] ?? [:]
            #expect(errors["authorization_pending"] == 1, "one pending answer before the approval: \(errors)")
            #expect(errors["slow_down"] == nil, "the daemon never polled faster than the interval: \(errors)")
            let code = (stats["device_codes"] as? [[String: Any]])?.first
            #expect(code?["status"] as? String == "consumed" && code?["polls"] as? Int == 2 && code?["interval"] as? Int == 1, "\(code ?? [:])")
            let access = try #require(try token(h, "test"))
            #expect(try server.accepts(access))
        }

        @Test func device_whenTheServerSaysSlowDown_addsFiveSecondsToTheInterval() throws {
            let h = try startVault()
            defer { Self.finish(h) }
            // A daemon that keeps to the interval never earns a real slow_down, so the
            // server answers the first poll with one (RFC 8628 section 3.5).
            try server.control(["device_interval": 1, "device_enforce_interval": true, "device_approve_after_polls": 0,
                                "fail": ["kind": "oauth_error", "error": "slow_down", "grant_type": "device_code"]])

            let (c, _) = try startDeviceLogin(h)
            let r = try h.wait(for: c, timeout: .seconds(20))
            #expect(r.status == 0, "\(r)")

            let stats = try server.stats()
            let polls = (stats["token_log"] as? [[String: Any]] ?? []).filter { $0["grant_type"] as? String == Self.deviceGrant }
            try #require(polls.count == 2, "one slow_down, then one poll that got the tokens: \(polls)")
            #expect(polls[0]["error"] as? String == "slow_down" && polls[1]["status"] as? Int == 200, "\(polls)")
            let gap = (polls[1]["t"] as? Double ?? 0) - (polls[0]["t"] as? Double ?? 0)
            #expect(gap >= 5.9 && gap < 9, "after slow_down the daemon waits 1 + 5 s: \(gap)")
            let errors = (stats["token_errors"] as? [String: Any])?[Self.deviceGrant] as? [String: Int] ?? [:]
            #expect(errors["slow_down"] == nil, "no further slow_down: \(errors)")
        }

        @Test func device_whenTheUserDenies_exits77AndStoresNothing() throws {
            let h = try startVault()
            defer { Self.finish(h) }

            let (c, userCode) = try startDeviceLogin(h)
            try server.control(["device_deny": userCode])
            let r = try h.wait(for: c, timeout: .seconds(10))
            #expect(r.status == 77, "\(r)")
            #expect(r.stderr.contains("denied"), "\(r.stderr)")
            #expect(try h.listJSON().isEmpty)
            let errors = (try server.stats()["token_errors"] as? [String: Any])?[Self.deviceGrant] as? [String: Int] ?? [:]
            #expect(errors["access_denied"] == 1, "\(errors)")
        }

        @Test func device_whenTheCodeExpires_exits75AndStoresNothing() throws {
            let h = try startVault()
            defer { Self.finish(h) }

            let (c, _) = try startDeviceLogin(h)
            try server.control(["expire_device_codes": true])
            let r = try h.wait(for: c, timeout: .seconds(10))
            #expect(r.status == 75, "\(r)")
            #expect(r.stderr.contains("expired"), "\(r.stderr)")
            #expect(try h.listJSON().isEmpty)
            let errors = (try server.stats()["token_errors"] as? [String: Any])?[Self.deviceGrant] as? [String: Int] ?? [:]
            #expect(errors["expired_token"] == 1, "\(errors)")
        }

        // MARK: - Client credentials

        @Test func clientCredentials_withShortLivedTokens_fetchesANewOneBeforeExpiry() throws {
            let h = try startVault()
            defer { Self.finish(h) }
            h.remember("cc-secret")
            try server.control(["access_token_lifetime": 3])
            let set = try h.vaultctl(["client-secret", "set", "cc"], stdin: "cc-secret\n")
            #expect(set.status == 0, "\(set)")

            let r = try h.vaultctl(["login", "cc"])
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("logged in: cc/default"), "\(r.stdout)")
            #expect(r.stdout.contains("no refresh token"), "client credentials carry no refresh token: \(r.stdout)")
            Self.expectNoServerSecrets(r.stdout + r.stderr, "vaultctl login's output")
            let first = try #require(try token(h, "cc"))

            // For longer than one lifetime, every token served is one the server accepts.
            let end = ContinuousClock.now + .milliseconds(4500)
            var served: Set<String> = [first]
            while ContinuousClock.now < end {
                let t = try #require(try token(h, "cc"), "vaultctl token keeps working")
                #expect(try server.accepts(t), "a served token is valid at the server")
                served.insert(t)
                usleep(250_000)  // the sampling rate of this check, not a synchronisation
            }
            #expect(served.count >= 2, "the daemon replaced the token")

            let log = (try server.stats()["token_log"] as? [[String: Any]] ?? []).filter { $0["grant_type"] as? String == "client_credentials" }
            #expect(log.count >= 2, "at least two client_credentials requests: \(log.count)")
            #expect(log.allSatisfy { $0["basic_auth"] as? Bool == true && $0["status"] as? Int == 200 }, "\(log)")
            if log.count >= 2, let t0 = log[0]["t"] as? Double, let t1 = log[1]["t"] as? Double {
                #expect(t1 - t0 < 3, "the new token was fetched before the first expired: \(t1 - t0) s")
            }
        }

        /// The state letter of /proc/PID/stat (R running, S sleeping, …).
        static func processState(_ pid: Int32) -> String? {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            return stat[stat.index(after: close)...].split(separator: " ").first.map(String.init)
        }

        // MARK: - Helpers for encodings

        /// The query of `url` as application/x-www-form-urlencoded (RFC 6749 appendix B): `+` is a space.
        static func formQuery(_ url: String) -> [String: String] {
            guard let q = url.split(separator: "?", maxSplits: 1).dropFirst().first else { return [:] }
            var out: [String: String] = [:]
            for pair in q.split(separator: "&") {
                let kv = pair.split(separator: "=", maxSplits: 1).map { $0.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "" }
                out[kv[0]] = kv.count > 1 ? kv[1] : ""
            }
            return out
        }

        static func base64(fromBase64URL s: String) -> String {
            var t = s.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while t.count % 4 != 0 { t += "=" }
            return t
        }
    }
}
