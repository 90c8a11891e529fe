@preconcurrency import Glibc
import Foundation
import Synchronization
import Testing
import TokenVaultClient

/// When the daemon refreshes (PRODUCT.md section 4, docs/refresh.md "When"
/// and "Single flight"), against the test OAuth server.
extension EndToEnd {
    @Suite struct RefreshSchedule {
        @Test func proactiveRefresh_ofThreeSecondTokens_neverServesATokenExpiringWithinMinValidity() throws {
            let lifetime = 3.0
            let f = try RefreshFixture(settings: ["access_token_lifetime": lifetime])
            defer { f.finish() }
            let first = try f.server.authorizationCode()
            try f.h.add(first)
            // Nobody asks for the token yet: the first refresh is the scheduler's own.
            try waitFor("the first proactive refresh", timeout: .seconds(3)) { try f.server.stats().refreshSuccess >= 1 }
            let client = f.client

            var tokens: Set<String> = [first.accessToken]
            var served = 0
            let end = ContinuousClock.now + .seconds(12)
            while ContinuousClock.now < end {
                // The daemon decides after `asked`, so the promise reads: at least 1 s left from `asked`.
                let asked = unixNow()
                let t = try client.token(provider: "test", minValidity: 1)
                if tokens.insert(t.accessToken).inserted { f.h.remember(t.accessToken) }
                let expiresAt = try #require(t.expiresAt, "a token with expires_in has an expiry")
                #expect(expiresAt - asked >= 1, "served a token with \(expiresAt - asked) s left for min_validity 1")
                // Independently of what the daemon says: the provider accepts it.
                #expect(try f.server.apiMe(t.accessToken) == 200, "the provider refused a token served with ≥ 1 s left")
                served += 1
                usleep(20_000)
            }

            let stats = try f.server.stats()
            let refreshes = stats.log("refresh_token")
            #expect(served > 100, "the loop ran: \(served) tokens served")
            #expect(refreshes.count >= 5 && refreshes.count <= 16, "13 s of 3-second tokens take several refreshes, and no loop: \(stats)")
            #expect(tokens.count >= refreshes.count, "each refresh's token was served: \(tokens.count) tokens, \(stats)")
            #expect(refreshes.allSatisfy { $0["status"] as? Int == 200 }, "\(stats)")
            // Each refresh was sent before the token it replaced expired: the
            // grant that issued it, plus the lifetime.
            let grants = stats.log("authorization_code") + refreshes
            for (previous, next) in zip(grants, grants.dropFirst()) {
                let issued = (previous["t"] as? Double ?? 0) + (previous["duration"] as? Double ?? 0)
                let sent = next["t"] as? Double ?? .infinity
                #expect(sent < issued + lifetime - 0.5, "a refresh was sent \(sent - issued) s after its token was issued, lifetime \(lifetime) s")
            }
            #expect(stats.reuseDetected == 0 && stats.replayed == 0, "rotation: every refresh token used once: \(stats)")
        }

        @Test func singleFlight_thousandConcurrentRequestsForAnExpiredToken_causeOneTokenEndpointRequest() throws {
            // Two-second tokens are due for refresh after about a second; that
            // refresh is held at the server for 3 s, so the token expires while
            // it runs and every request below has to wait for it.
            let f = try RefreshFixture(settings: ["access_token_lifetime": 2])
            defer { f.finish() }
            let first = try f.server.authorizationCode()
            try f.server.control(["access_token_lifetime": 3600, "fail": [["kind": "slow", "seconds": 3, "grant_type": "refresh_token"]]])
            try f.h.add(first)
            // The daemon computed the expiry before `add` returned: 2 s from then at the latest.
            let expiry = unixNow() + 2
            try waitFor("the proactive refresh to start", timeout: .seconds(5)) { try f.h.listed()?["state"] as? String == "refreshing" }
            // Time passing is the point here: wait until the token has expired.
            while unixNow() < expiry { usleep(20_000) }
            #expect(try f.server.stats().refreshSuccess == 0, "the refresh is still held at the server")

            let threads = 100, perThread = 10
            let results = Mutex<[String: Int]>([:])
            let failures = Mutex<[String]>([])
            let firstLatencies = Mutex<[Double]>([])
            let socket = f.h.socketPath
            // One thread and one connection per client (not concurrentPerform, which
            // runs as many at once as there are cores), connected before they all start.
            let connected = DispatchGroup(), go = DispatchGroup(), done = DispatchGroup()
            go.enter()
            for _ in 0..<threads {
                connected.enter()
                done.enter()
                Thread {
                    let client = TokenVaultClient(socketPath: socket, timeout: 30)
                    _ = try? client.status()
                    connected.leave()
                    go.wait()
                    for i in 0..<perThread {
                        let start = ContinuousClock.now
                        do {
                            let t = try client.token(provider: "test", minValidity: 1)
                            results.withLock { $0[t.accessToken, default: 0] += 1 }
                            if i == 0 { firstLatencies.withLock { $0.append((ContinuousClock.now - start) / .seconds(1)) } }
                        } catch {
                            failures.withLock { $0.append("\(error)") }
                        }
                    }
                    done.leave()
                }.start()
            }
            connected.wait()
            go.leave()
            done.wait()
            let got = results.withLock { $0 }
            for token in got.keys { f.h.remember(token) }
            #expect(failures.withLock { $0 }.isEmpty, "every request succeeds: \(failures.withLock { $0.prefix(3) })")
            #expect(got.count == 1 && got.values.first == threads * perThread, "all \(threads * perThread) requests got the same token: \(got.values)")
            #expect(got.keys.first != first.accessToken, "they got the new token, not the expired one")
            let stats = try f.server.stats()
            #expect(stats.refreshRequests == 1, "exactly one refresh request: \(stats)")
            #expect(stats.int("max_concurrent_token_requests") == 1, "\(stats)")
            #expect(stats.reuseDetected == 0 && stats.replayed == 0, "\(stats)")
            if let token = got.keys.first { #expect(try f.server.apiMe(token) == 200) }
            let waits = firstLatencies.withLock { $0 }.sorted()
            if !waits.isEmpty { print("single flight: \(threads * perThread) requests over \(threads) connections, \(stats.refreshRequests) refresh request(s); " +
                  "first request per connection waited median \(waits[waits.count / 2]) s, max \(waits.last ?? 0) s") }
        }

        @Test func manyItemsDueAtOnce_areRefreshedInParallel_notAboutOnePerSecond() throws {
            // Refreshes used to block Dispatch's global pool, which URLSession
            // needs to deliver answers: with more than two due at once, each
            // waited for libdispatch to add a thread, about once a second.
            let f = try RefreshFixture(start: false)
            defer { f.finish() }
            let clockFile = f.h.folder + "/clock"
            try "0\n".write(toFile: clockFile, atomically: true, encoding: .utf8)
            f.h.daemonEnvironment["TOKENVAULT_TEST_CLOCK_FILE"] = clockFile
            try f.h.start()
            let count = 24
            for i in 0..<count { try f.h.add(try f.server.authorizationCode(), account: "a\(i)") }
            // The test seam makes all of them due at the same instant (see wallClockJump_… below).
            try "3500\n".write(toFile: clockFile, atomically: true, encoding: .utf8)
            let jumped = ContinuousClock.now
            kill(f.h.daemonPID, SIGUSR1)
            try waitFor("\(count) refreshes", timeout: .seconds(30)) { try f.server.stats().refreshSuccess >= count }
            let took = ContinuousClock.now - jumped
            #expect(took < .seconds(4), "\(count) refreshes due at once took \(took)")
            let stats = try f.server.stats()
            #expect(stats.refreshRequests == count && stats.reuseDetected == 0 && stats.replayed == 0, "\(stats)")
            try waitFor("every item valid", timeout: .seconds(5)) {
                try f.h.listJSON().filter { $0["state"] as? String == "valid" }.count == count
            }
        }

        @Test func wallClockJump_throughTheTestSeam_reevaluatesDeadlinesAndRefreshesAtOnce() throws {
            // This is the injectable-clock seam (TOKENVAULT_TEST_CLOCK_FILE, re-read
            // on SIGUSR1): it moves the daemon's WallClock and wakes the scheduler.
            // A real clock jump wakes the timerfd by TFD_TIMER_CANCEL_ON_SET, which
            // cannot be tested without changing this machine's clock.
            let f = try RefreshFixture(start: false)
            defer { f.finish() }
            let clockFile = f.h.folder + "/clock"
            try "0\n".write(toFile: clockFile, atomically: true, encoding: .utf8)
            f.h.daemonEnvironment["TOKENVAULT_TEST_CLOCK_FILE"] = clockFile
            try f.h.start()
            let first = try f.server.authorizationCode()
            #expect(first.expiresIn == 3600)
            try f.h.add(first)
            let next = try #require(try f.h.listed()?["next_refresh"] as? String, "a one-hour token is scheduled")
            let due = try #require(ISO8601DateFormatter().date(from: next)).timeIntervalSinceNow
            #expect(due > 3000 && due < 3600 - 59, "due about 6 minutes before expiry: in \(due) s")
            #expect(try f.server.stats().refreshRequests == 0)

            // 3500 s later, the token expires in 100 s: past its refresh margin.
            try "3500\n".write(toFile: clockFile, atomically: true, encoding: .utf8)
            let jumped = ContinuousClock.now
            kill(f.h.daemonPID, SIGUSR1)
            try waitFor("a refresh after the clock jump", timeout: .seconds(5)) { try f.server.stats().refreshSuccess == 1 }
            let took = ContinuousClock.now - jumped
            #expect(took < .seconds(2), "refreshed \(took) after the jump")
            try waitFor("the item to be valid again", timeout: .seconds(5)) { try f.h.listed()?["state"] as? String == "valid" }
            let t = try f.client.token(provider: "test", minValidity: 60)
            f.h.remember(t.accessToken)
            #expect(t.accessToken != first.accessToken)
            #expect(try f.server.apiMe(t.accessToken) == 200)
            #expect(f.h.daemonLog.contains("wall clock"), "the daemon logs the re-evaluation")
            let stats = try f.server.stats()
            #expect(stats.refreshRequests == 1, "one refresh, not a loop: \(stats)")
        }
    }
}
