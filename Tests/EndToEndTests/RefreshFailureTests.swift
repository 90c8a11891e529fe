@preconcurrency import Glibc
import Foundation
import Testing
import TokenVaultClient

/// What the daemon does when the provider fails (docs/refresh.md
/// "Failures", `report-401`, and GitHub-like quirks), against the test OAuth server.
extension EndToEnd {
    @Suite struct RefreshFailures {
        /// Refresh-grant entries of the token log as (start time, status, injected kind).
        static func refreshAttempts(_ stats: OAuthTestServer.Stats) -> [(t: Double, status: Int?, injected: String?)] {
            stats.log("refresh_token").map { ($0["t"] as? Double ?? 0, $0["status"] as? Int, $0["injected"] as? String) }
        }

        @Test func refresh_whenProviderReturns503_backsOffNoSoonerThanRetryAfter_andKeepsServingTheOldToken() throws {
            let f = try RefreshFixture(settings: ["access_token_lifetime": 4])
            defer { f.finish() }
            let first = try f.server.authorizationCode()
            // Later tokens live long, so the one that finally comes stays.
            try f.server.control(["access_token_lifetime": 3600,
                                  "fail": [["kind": "http_503", "retry_after": 2, "count": 3, "grant_type": "refresh_token"]]])
            try f.h.add(first)
            let expiry = try #require(try f.h.listed()?["expires_at_unix"] as? Double)
            let client = f.client

            try waitFor("the first refresh attempt to get a 503", timeout: .seconds(5)) { try f.server.stats().int("injected_failures", "http_503") >= 1 }
            // While the old token is valid, it is still served (min_validity 0).
            var servedOld = 0
            while unixNow() < expiry - 0.3 {
                #expect(try client.token(provider: "test").accessToken == first.accessToken)
                servedOld += 1
                usleep(50_000)
            }
            #expect(servedOld > 0)
            // Afterwards: a temporary failure or, once the refresh came through, the new token.
            var newToken: String?
            var refused = 0
            try waitFor("the refresh to succeed after three 503s", timeout: .seconds(30), every: .milliseconds(100)) {
                do {
                    let t = try client.token(provider: "test")
                    if t.accessToken != first.accessToken { newToken = t.accessToken }
                } catch {
                    #expect((error as? TokenVaultError)?.kind == "temporary", "while backing off: \(error)")
                    refused += 1
                }
                return newToken != nil
            }
            if let newToken { f.h.remember(newToken); #expect(try f.server.apiMe(newToken) == 200) }

            let stats = try f.server.stats()
            let attempts = Self.refreshAttempts(stats)
            #expect(attempts.map(\.status) == [503, 503, 503, 200], "three 503s, then success: \(stats)")
            for (a, b) in zip(attempts, attempts.dropFirst()) {
                #expect(b.t - a.t >= 1.95, "retried \(b.t - a.t) s after a 503 with Retry-After: 2")
            }
            if attempts.count == 4 {
                #expect(attempts[3].t - attempts[2].t > attempts[1].t - attempts[0].t, "the backoff grows: \(stats)")
            }
            #expect(stats.reuseDetected == 0 && stats.replayed == 0, "\(stats)")
        }

        @Test func refresh_whenProviderReturns500_retriesAfterBackoff_beforeTheTokenExpires() throws {
            let f = try RefreshFixture(settings: ["access_token_lifetime": 6])
            defer { f.finish() }
            let first = try f.server.authorizationCode()
            try f.server.inject(["kind": "http_500", "grant_type": "refresh_token"])
            try f.h.add(first)
            let expiry = try #require(try f.h.listed()?["expires_at_unix"] as? Double) + 1
            try waitFor("a 500", timeout: .seconds(6)) { try f.server.stats().int("injected_failures", "http_500") == 1 }
            #expect(try f.client.token(provider: "test").accessToken == first.accessToken, "the old token is served after the 500")
            try waitFor("the retried refresh", timeout: .seconds(10)) { try f.server.stats().refreshSuccess == 1 }
            let stats = try f.server.stats()
            let attempts = Self.refreshAttempts(stats)
            #expect(attempts.map(\.status) == [500, 200], "\(stats)")
            if attempts.count == 2 {
                #expect(attempts[1].t - attempts[0].t >= 1.5, "backoff of 2 s ± 20 % after a 500: \(stats)")
                #expect(attempts[1].t < expiry, "the retry came before the old token expired")
            }
            let t = try f.client.token(provider: "test", minValidity: 1)
            f.h.remember(t.accessToken)
            #expect(t.accessToken != first.accessToken)
        }

        @Test func refresh_whenTheResponseIsLost_retriesOnceWithTheSameRefreshToken() throws {
            let f = try RefreshFixture()
            defer { f.finish() }
            let first = try f.server.authorizationCode()
            try f.h.add(first)

            // Processed at the server, answer lost: the retry with the same
            // refresh token gets the same new pair from the server's grace.
            try f.server.inject(["kind": "drop", "process": true, "grant_type": "refresh_token"])
            let r = try f.h.vaultctl(["refresh", "test"])
            #expect(r.status == 0, "\(r)")
            var stats = try f.server.stats()
            #expect(stats.refreshRequests == 2 && stats.replayed == 1 && stats.reuseDetected == 0, "\(stats)")
            #expect(stats.int("dropped_connections") == 1, "\(stats)")
            let second = try f.client.token(provider: "test", minValidity: 60).accessToken
            f.h.remember(second)
            #expect(second != first.accessToken)
            #expect(try f.server.apiMe(second) == 200)
            #expect(f.h.daemonLog.contains("retrying once with the same refresh token"))

            // Dropped before processing: the retry is an ordinary first use.
            try f.server.inject(["kind": "drop", "grant_type": "refresh_token"])
            #expect(try f.h.vaultctl(["refresh", "test"]).status == 0)
            stats = try f.server.stats()
            #expect(stats.refreshRequests == 4 && stats.replayed == 1 && stats.reuseDetected == 0, "\(stats)")

            // The refresh token the daemon kept is the current one: a plain refresh works.
            // (Five requests, four issued tokens: the one dropped unprocessed issued none.)
            #expect(try f.h.vaultctl(["refresh", "test"]).status == 0)
            stats = try f.server.stats()
            #expect(stats.refreshRequests == 5 && stats.refreshSuccess == 4 && stats.reuseDetected == 0, "\(stats)")
            let third = try f.client.token(provider: "test").accessToken
            f.h.remember(third)
            #expect(try f.server.apiMe(third) == 200)
        }

        @Test func refresh_whenProviderSaysInvalidGrant_marksNeedsReauth_andRunsNotifyCommandWithoutTheToken() throws {
            let f = try RefreshFixture(settings: ["access_token_lifetime": 3], start: false)
            defer { f.finish() }
            let notified = f.h.folder + "/notified"
            try f.h.writeConfig(["providers": ["test": f.server.provider(["notify_command": ["/bin/sh", "-c", "env > \(notified)"]])]])
            try f.h.start()
            let first = try f.server.authorizationCode()
            try f.server.inject(["kind": "invalid_grant", "grant_type": "refresh_token"])
            try f.h.add(first)

            try waitFor("needs-reauth after invalid_grant", timeout: .seconds(8)) { try f.h.listed()?["state"] as? String == "needs-reauth" }
            let token = try f.h.vaultctl(["token", "test"])
            #expect(token.status == 5, "\(token)")
            #expect(token.stdout.isEmpty)
            #expect(failure { () throws(TokenVaultError) in try f.client.token(provider: "test") }?.kind == "needsReauth")

            var env = ""
            try waitFor("the notify_command to write its environment", timeout: .seconds(5)) {
                env = (try? String(contentsOfFile: notified, encoding: .utf8)) ?? ""
                return env.contains("TOKENVAULT_MESSAGE=")
            }
            let lines = Set(env.split(separator: "\n").map(String.init))
            #expect(lines.contains("TOKENVAULT_PROVIDER=test"), "\(lines.filter { $0.hasPrefix("TOKENVAULT") })")
            #expect(lines.contains("TOKENVAULT_ACCOUNT=default"))
            #expect(lines.contains("TOKENVAULT_EVENT=needs-reauth"))
            #expect(!env.contains(first.accessToken) && !env.contains(first.refreshToken ?? "-"), "no token in the notification's environment")
            // No crash loop: the item is not refreshed again.
            #expect(try f.server.stats().refreshRequests == 1)
        }

        @Test func refresh_afterTheUserRevokedTheAppAtTheProvider_isNeedsReauthWithExit5() throws {
            let f = try RefreshFixture()
            defer { f.finish() }
            let first = try f.server.authorizationCode()
            try f.h.add(first)
            try f.server.control(["revoke_all": true])
            #expect(try f.server.apiMe(first.accessToken) == 401)
            // A request for more validity than the token has left makes the daemon refresh.
            let token = try f.h.vaultctl(["token", "test", "--min-validity", "7200"])
            #expect(token.status == 5, "\(token)")
            #expect(try f.h.listed()?["state"] as? String == "needs-reauth")
            #expect(try f.h.vaultctl(["token", "test"]).status == 5)
            let stats = try f.server.stats()
            #expect(stats.refreshRequests == 1, "one refused refresh, no retries: \(stats)")
            #expect((stats.json["token_errors"] as? [String: [String: Int]])?["refresh_token"]?["invalid_grant"] == 1, "\(stats)")
            // An explicit `vaultctl refresh` tries again (the way back after, say,
            // a missing client secret was set), and is refused the same way.
            #expect(try f.h.vaultctl(["refresh", "test"]).status == 5)
            #expect(try f.server.stats().refreshRequests == 2)
            #expect(try f.h.listed()?["state"] as? String == "needs-reauth")
        }

        @Test func report401_refreshesTheToken_orMarksNeedsReauthWhenTheRefreshIsRefused() throws {
            let f = try RefreshFixture()
            defer { f.finish() }
            let first = try f.server.authorizationCode()
            try f.h.add(first)
            try f.server.control(["expire_access_tokens": true])
            #expect(try f.server.apiMe(first.accessToken) == 401)

            let r = try f.h.vaultctl(["report-401", "test"])
            #expect(r.status == 0, "\(r)")
            #expect(r.stdout.contains("valid"), "\(r)")
            #expect(try f.server.stats().refreshSuccess == 1)
            #expect(try f.h.listed()?["state"] as? String == "valid")
            let second = try f.client.token(provider: "test").accessToken
            f.h.remember(second)
            #expect(second != first.accessToken)
            #expect(try f.server.apiMe(second) == 200)

            // The client library's form, with the refresh refused.
            try f.server.inject(["kind": "invalid_grant", "grant_type": "refresh_token"])
            try f.client.report401(provider: "test")
            #expect(try f.h.listed()?["state"] as? String == "needs-reauth")
            #expect(try f.h.vaultctl(["token", "test"]).status == 5)
            #expect(try f.server.stats().refreshRequests == 2)
        }

        @Test func githubQuirk_errorWithHTTP200_isTheOAuthError() throws {
            let f = try RefreshFixture()
            defer { f.finish() }
            let first = try f.server.authorizationCode()
            try f.h.add(first)
            try f.server.inject(["kind": "error_200", "error": "bad_refresh_token", "grant_type": "refresh_token"])
            let r = try f.h.vaultctl(["refresh", "test"])
            #expect(r.status == 5, "an error object with HTTP 200 is the OAuth error, not a token: \(r)")
            #expect(r.stderr.contains("bad_refresh_token"), "\(r)")
            #expect(try f.h.listed()?["state"] as? String == "needs-reauth")
        }

        @Test func githubQuirk_commaScopeAndNoExpiresIn_useAssumeLifetimeSeconds() throws {
            // The server still expires its tokens after 30 s but does not say
            // so; the config assumes 4 s, so the daemon refreshes every ~2 s.
            let f = try RefreshFixture(settings: ["include_expires_in": false, "scope_separator": ",", "access_token_lifetime": 30],
                                       provider: ["assume_lifetime_seconds": 4])
            defer { f.finish() }
            let first = try f.server.authorizationCode()
            #expect(first.expiresIn == nil && first.scope == "read,write", "\(first.json)")
            try f.h.add(first)
            let listed = try #require(try f.h.listed())
            let expiresAt = try #require(listed["expires_at_unix"] as? Double, "the assumed lifetime gives an expiry: \(listed)")
            #expect(abs(expiresAt - unixNow() - 4) < 2, "expiry about 4 s away: \(expiresAt - unixNow())")
            #expect(listed["refreshable"] as? Bool == true, "\(listed)")

            try waitFor("two refreshes with the assumed lifetime", timeout: .seconds(8)) { try f.server.stats().refreshSuccess >= 2 }
            let asked = unixNow()
            let t = try f.client.token(provider: "test", minValidity: 1)
            f.h.remember(t.accessToken)
            #expect(t.accessToken != first.accessToken)
            #expect(t.scope == "read,write", "the comma-separated scope is kept as sent")
            #expect(try f.server.apiMe(t.accessToken) == 200)
            let left = (t.expiresAt ?? 0) - asked
            #expect(left > 1 && left < 5, "each refreshed token is assumed to live 4 s: \(left)")
        }
    }
}
