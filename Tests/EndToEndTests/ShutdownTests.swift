import Foundation
import Synchronization
import Testing
import TokenVaultClient
import VaultModel
import VaultProtocol

/// SIGTERM while clients are busy: stop accepting, finish what is in
/// flight, exit 0, lose nothing (PRODUCT.md section 7).
extension EndToEnd {
    @Suite struct Shutdown {
        /// What the burst threads saw, shared between them.
        final class BurstRecord: Sendable {
            struct State {
                var successes = [Int](repeating: 0, count: 8)
                var endedUnavailable = Set<Int>()
                var problems: [String] = []
                var added: [String: String] = [:]
                var finished = 0
            }
            let state = Mutex(State())
        }

        @Test func sigtermDuringABurstOfEightClients_endsCleanlyAndKeepsEveryItem() throws {
            let h = try DaemonHarness()
            defer { h.finish() }
            try h.start()
            var tokens: [String: String] = [:]
            for i in 0..<4 { tokens["burst\(i)"] = try h.addToken("burst\(i)") }

            let record = BurstRecord()
            let socket = h.socketPath
            let known = tokens
            let giveUp = ContinuousClock.now + .seconds(60)
            for thread in 0..<8 {
                Thread.detachNewThread {
                    defer { record.state.withLock { $0.finished += 1 } }
                    let client = TokenVaultClient(socketPath: socket, timeout: 10)
                    var n = 0
                    while ContinuousClock.now < giveUp {
                        n += 1
                        do throws(TokenVaultError) {
                            if thread < 2 {
                                // Writers: every add that is answered must survive the restart.
                                let provider = "w\(thread)-\(n)"
                                let token = distinctiveSecret("tvburst")
                                let response = JSON.object(JSONObject([("access_token", .string(token)), ("token_type", "Bearer"), ("expires_in", 3600)]))
                                record.state.withLock { $0.added["pending-" + provider] = token }
                                _ = try client.raw(.add, [("provider", .string(provider)), ("token_response", response)])
                                record.state.withLock { $0.added[provider] = token }
                            } else if thread == 2 {
                                _ = try client.list()
                            } else {
                                let provider = "burst\(n % 4)"
                                let t = try client.token(provider: provider)
                                if t.accessToken != known[provider] {
                                    record.state.withLock { $0.problems.append("thread \(thread) got the wrong token for \(provider)") }
                                }
                            }
                            record.state.withLock { $0.successes[thread] += 1 }
                        } catch .daemonUnavailable {
                            record.state.withLock { _ = $0.endedUnavailable.insert(thread) }
                            return
                        } catch {
                            record.state.withLock { $0.problems.append("thread \(thread): unexpected \(error.code.rawValue): \(error.message)") }
                            return
                        }
                    }
                    record.state.withLock { $0.problems.append("thread \(thread) still got answers after 60 s") }
                }
            }

            try waitFor("every client thread to get answers", timeout: .seconds(30)) {
                record.state.withLock { s in s.successes.allSatisfy { $0 >= 20 } || s.finished > 0 }
            }
            try h.stop()
            try waitFor("every client thread to see the daemon gone", timeout: .seconds(30)) {
                record.state.withLock { $0.finished == 8 }
            }
            let seen = record.state.withLock { $0 }
            for secret in seen.added.values { h.remember(secret) }
            #expect(seen.problems.isEmpty, "\(seen.problems)")
            #expect(seen.endedUnavailable == Set(0..<8), "every thread ended on .daemonUnavailable")
            #expect(seen.successes.allSatisfy { $0 >= 20 }, "\(seen.successes)")

            try h.start()
            let client = TokenVaultClient(socketPath: h.socketPath, timeout: 10)
            for (provider, token) in tokens {
                #expect(try h.vaultctl(["token", provider]).stdout == token + "\n", "\(provider) is intact")
            }
            let added = seen.added.filter { !$0.key.hasPrefix("pending-") }
            #expect(!added.isEmpty, "the writers added items before SIGTERM")
            for (provider, token) in added {
                #expect(try client.token(provider: provider).accessToken == token, "\(provider), added during the burst, is intact")
            }
            let listed = Set(try client.list().map(\.provider))
            #expect(listed.isSuperset(of: Set(added.keys).union(tokens.keys)))
            for (key, token) in seen.added where key.hasPrefix("pending-") && added[String(key.dropFirst(8))] == nil {
                // An add cut off by SIGTERM is either fully stored or absent.
                let provider = String(key.dropFirst(8))
                if listed.contains(provider) { #expect(try client.token(provider: provider).accessToken == token) }
            }
            #expect(h.daemonLog.contains("received SIGTERM"))
        }
    }
}
