import Foundation
import Testing
import TokenVaultClient

/// The error a blocking call threw, nil if it succeeded.
func failure<T>(_ body: () throws(TokenVaultError) -> T) -> TokenVaultError? {
    do { _ = try body(); return nil } catch { return error }
}

/// Runs `body` in a synchronous context, so the blocking overloads are
/// chosen even inside an async test.
func blocking<T>(_ body: () throws -> T) rethrows -> T { try body() }

/// The error an async call threw, nil if it succeeded.
func failure<T>(_ body: () async throws(TokenVaultError) -> T) async -> TokenVaultError? {
    do { _ = try await body(); return nil } catch { return error }
}

extension TokenVaultError {
    /// The case's name, to compare cases whatever their message.
    var kind: String {
        switch self {
        case .locked: "locked"
        case .needsReauth: "needsReauth"
        case .notFound: "notFound"
        case .daemonUnavailable: "daemonUnavailable"
        case .denied: "denied"
        case .badInput: "badInput"
        case .temporary: "temporary"
        case .usage: "usage"
        case .protocolError: "protocolError"
        case .failure: "failure"
        }
    }
}

/// `TokenVaultClient` against a real daemon (PRODUCT.md section 5).
extension EndToEnd {
    @Suite struct ClientLibrary {
        @Test func asyncAndBlockingForms_reconnectAfterARestart_andThrowTypedErrors() async throws {
            let h = try DaemonHarness()
            defer { h.finish() }
            try h.start()
            let token = try h.addToken("library", account: "ci")
            let client = TokenVaultClient(socketPath: h.socketPath, timeout: 10)

            // Async forms.
            let t = try await client.token(provider: "library", account: "ci", minValidity: 60)
            #expect(t.accessToken == token)
            #expect(t.provider == "library" && t.account == "ci")
            #expect(t.scope == "read write")
            #expect(abs((t.expiresAt ?? 0) - Date().timeIntervalSince1970 - 3600) < 120)
            #expect(!String(describing: t).contains(token), "a Token's description is redacted")
            #expect(try await client.bearerHeader(provider: "library", account: "ci") == "Bearer " + token)
            let items = try await client.list()
            #expect(items.count == 1)
            #expect(items.first?.provider == "library" && items.first?.state == .valid && items.first?.backend == "sqlite")
            #expect(await failure { () async throws(TokenVaultError) in try await client.token(provider: "library") }?.kind == "notFound",
                    "the default account is another item")
            // Blocking forms.
            #expect(try blocking { try client.token(provider: "library", account: "ci").accessToken } == token)
            #expect(try blocking { try client.bearerHeader(provider: "library", account: "ci") } == "Bearer " + token)
            #expect(try blocking { try client.status().backend } == "sqlite")

            // The same client object carries on after the daemon restarts.
            try h.restart()
            #expect(try blocking { try client.token(provider: "library", account: "ci").accessToken } == token)
            try h.restart()
            #expect(try await client.token(provider: "library", account: "ci").accessToken == token)

            // Typed errors.
            #expect(failure { () throws(TokenVaultError) in try client.token(provider: "nosuch") }?.kind == "notFound")
            #expect(failure { () throws(TokenVaultError) in try client.token(provider: "library", account: "ci", minValidity: 7200) }?.kind == "needsReauth")

            try h.addToken("refused")
            try await client.report401(provider: "refused")
            #expect(await failure { () async throws(TokenVaultError) in try await client.token(provider: "refused") }?.kind == "needsReauth")
            #expect(try blocking { try client.list().first { $0.provider == "refused" }?.state } == .needsReauth)

            let passphrase = try h.newPassphraseFile("pass")
            #expect(try h.vaultctl(["passphrase", "set", "--passphrase-file", passphrase]).status == 0)
            let guarded = try h.addToken("guarded", mode: "when-unlocked")
            #expect(try blocking { try client.token(provider: "guarded").accessToken } == guarded)
            #expect(try h.vaultctl(["lock"]).status == 0)
            #expect(failure { () throws(TokenVaultError) in try client.token(provider: "guarded") }?.kind == "locked")
            #expect(await failure { () async throws(TokenVaultError) in try await client.bearerHeader(provider: "guarded") }?.kind == "locked")
            #expect(try blocking { try client.token(provider: "library", account: "ci").accessToken } == token, "after-first-unlock is still served")
            #expect(try h.vaultctl(["unlock", "--passphrase-file", passphrase]).status == 0)
            #expect(try blocking { try client.token(provider: "guarded").accessToken } == guarded)

            try h.stop()
            #expect(failure { () throws(TokenVaultError) in try client.token(provider: "library", account: "ci") }?.kind == "daemonUnavailable")
            #expect(await failure { () async throws(TokenVaultError) in try await client.list() }?.kind == "daemonUnavailable")
            let nowhere = TokenVaultClient(socketPath: h.folder + "/no-socket-here", timeout: 2)
            #expect(failure { () throws(TokenVaultError) in try nowhere.list() }?.kind == "daemonUnavailable")
        }

        @Test func keptConnectionClosedForIdleness_isReopenedTransparently() throws {
            let h = try DaemonHarness(daemonEnvironment: ["TOKENVAULT_IDLE_TIMEOUT_MS": "300"])
            defer { h.finish() }
            try h.start()
            let token = try h.addToken("library")
            let client = TokenVaultClient(socketPath: h.socketPath, timeout: 10)
            #expect(try client.token(provider: "library").accessToken == token)
            let closedBefore = h.daemonLog.components(separatedBy: "idle for").count
            try waitFor("the daemon to close the idle connection", timeout: .seconds(10)) {
                h.daemonLog.components(separatedBy: "idle for").count > closedBefore
            }
            #expect(try client.token(provider: "library").accessToken == token, "the client reconnects after an idle close")
        }
    }
}
