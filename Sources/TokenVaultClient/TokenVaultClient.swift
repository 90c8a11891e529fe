import Dispatch
import Synchronization
import VaultModel
import VaultProtocol

/// The client library: asks `tokenvaultd` for tokens over its Unix socket.
///
/// It keeps one connection open and reconnects when the daemon restarts.
/// Calls on one client are serialised; use several clients for parallel
/// requests. Blocking forms are for threads and scripts; the async forms
/// run the blocking call on a private queue, never on the cooperative pool.
///
/// ```swift
/// let vault = TokenVaultClient()
/// let header = try vault.bearerHeader(provider: "github", minValidity: 60)
/// request.setValue(header, forHTTPHeaderField: "Authorization")
/// ```
public final class TokenVaultClient: Sendable {
    /// The socket this client talks to.
    public let socketPath: String
    private let timeoutMs: Int32
    private let connection = Mutex<Connection?>(nil)
    private let queue = DispatchQueue(label: "TokenVaultClient")

    /// A client of the daemon at `socketPath` (default: `$TOKENVAULT_SOCKET`,
    /// else `$XDG_RUNTIME_DIR/tokenvault/socket`), waiting at most `timeout` seconds per call.
    public init(socketPath: String? = nil, timeout: Double = 30) {
        self.socketPath = SocketPath.resolve(override: socketPath)
        self.timeoutMs = Int32(max(1, min(timeout, 3600)) * 1000)
    }

    /// Sends one request, connecting (or reconnecting once, if the daemon
    /// restarted since the last call) as needed.
    func call(_ op: Operation, _ params: [(String, JSON)] = []) throws(TokenVaultError) -> JSON {
        try connection.withLock { (conn: inout Connection?) throws(TokenVaultError) -> JSON in
            let hadConnection = conn != nil
            if conn == nil { conn = try Connection(path: socketPath, timeoutMs: timeoutMs) }
            do throws(TokenVaultError) {
                return try conn!.send(op, params)
            } catch .daemonUnavailable(let message) {
                conn = nil
                guard hadConnection else { throw .daemonUnavailable(message) }
                conn = try Connection(path: socketPath, timeoutMs: timeoutMs)
                do throws(TokenVaultError) {
                    return try conn!.send(op, params)
                } catch {
                    if case .daemonUnavailable = error { conn = nil }
                    throw error
                }
            } catch .protocolError(let message) {
                conn = nil
                throw .protocolError(message)
            } catch {
                throw error
            }
        }
    }

    /// Closes the kept connection (the next call opens a new one).
    public func close() {
        connection.withLock { $0 = nil }
    }

    // MARK: - Blocking calls

    /// A token valid for at least `minValidity` seconds (the daemon refreshes
    /// it first if it can, or refuses with `needsReauth`).
    public func token(provider: String, account: String? = nil, minValidity: Double = 0) throws(TokenVaultError) -> Token {
        var params: [(String, JSON)] = [("provider", .string(provider))]
        if let account { params.append(("account", .string(account))) }
        if minValidity > 0 { params.append(("min_validity", .number(minValidity))) }
        let r = try call(.token, params)
        guard let access = r["access_token"]?.stringValue else { throw .protocolError("token response without access_token") }
        return Token(provider: r["provider"]?.stringValue ?? provider, account: r["account"]?.stringValue ?? account ?? ItemName.defaultAccount,
                     accessToken: access, expiresAt: r["expires_at_unix"]?.numberValue, scope: r["scope"]?.stringValue)
    }

    /// The value of an `Authorization` header: `Bearer TOKEN`.
    public func bearerHeader(provider: String, account: String? = nil, minValidity: Double = 0) throws(TokenVaultError) -> String {
        try token(provider: provider, account: account, minValidity: minValidity).bearerValue
    }

    /// Every item the daemon holds, with its state.
    public func list() throws(TokenVaultError) -> [ItemInfo] {
        let r = try call(.list)
        guard let items = r["items"]?.arrayValue else { throw .protocolError("list response without items") }
        return items.compactMap { i in
            guard let provider = i["provider"]?.stringValue, let account = i["account"]?.stringValue,
                  let mode = i["mode"]?.stringValue.flatMap(AccessMode.init(rawValue:)),
                  let state = i["state"]?.stringValue.flatMap(ItemState.init(rawValue:)) else { return nil }
            return ItemInfo(provider: provider, account: account, kind: i["kind"]?.stringValue ?? "token", mode: mode, state: state,
                            expiresAt: i["expires_at_unix"]?.numberValue, backend: i["backend"]?.stringValue ?? "",
                            refreshable: i["refreshable"]?.boolValue ?? false, note: i["note"]?.stringValue)
        }
    }

    /// Reports that a server answered 401 to the token it was given: the
    /// daemon refreshes it, or marks the item `needs-reauth`.
    public func report401(provider: String, account: String? = nil) throws(TokenVaultError) {
        var params: [(String, JSON)] = [("provider", .string(provider))]
        if let account { params.append(("account", .string(account))) }
        _ = try call(.report401, params)
    }

    /// The daemon's status.
    public func status() throws(TokenVaultError) -> DaemonStatus {
        DaemonStatus(json: try call(.status))
    }

    /// Sends any operation with raw parameters; for `vaultctl`.
    public func raw(_ op: Operation, _ params: [(String, JSON)] = []) throws(TokenVaultError) -> JSON {
        try call(op, params)
    }

    // MARK: - Async calls

    private func async<T: Sendable>(_ body: @escaping @Sendable () throws(TokenVaultError) -> T) async throws(TokenVaultError) -> T {
        let result: Result<T, TokenVaultError> = await withCheckedContinuation { cont in
            queue.async {
                do throws(TokenVaultError) { cont.resume(returning: .success(try body())) } catch { cont.resume(returning: .failure(error)) }
            }
        }
        return try result.get()
    }

    /// Async form of `token(provider:account:minValidity:)`.
    public func token(provider: String, account: String? = nil, minValidity: Double = 0) async throws(TokenVaultError) -> Token {
        try await async { () throws(TokenVaultError) in try self.token(provider: provider, account: account, minValidity: minValidity) }
    }

    /// Async form of `bearerHeader(provider:account:minValidity:)`.
    public func bearerHeader(provider: String, account: String? = nil, minValidity: Double = 0) async throws(TokenVaultError) -> String {
        try await async { () throws(TokenVaultError) in try self.bearerHeader(provider: provider, account: account, minValidity: minValidity) }
    }

    /// Async form of `list()`.
    public func list() async throws(TokenVaultError) -> [ItemInfo] {
        try await async { () throws(TokenVaultError) in try self.list() }
    }

    /// Async form of `report401(provider:account:)`.
    public func report401(provider: String, account: String? = nil) async throws(TokenVaultError) {
        try await async { () throws(TokenVaultError) in try self.report401(provider: provider, account: account) }
    }
}
