import Synchronization
import VaultCrypto
import VaultModel
import VaultProtocol
import VaultStore

/// Who is asking: the socket peer's credentials.
public struct Peer: Sendable {
    public let pid: Int32
    public let uid: UInt32
    /// `/proc/PID/exe` at connect time, nil if unreadable.
    public let executable: String?
}

/// The daemon's request handler: turns protocol requests into vault
/// operations and answers. Safe to call from every connection thread.
public final class VaultService: Sendable {
    public let vault: Vault
    let logger: Logger
    let audit: AuditLog
    let config: Mutex<Config>
    /// Why this store was chosen, for `status` (a migration changes it).
    let storeReason: Mutex<String>
    let socketPath: String
    let configPath: String
    /// Moves the vault between stores (`migrate`); nil where the daemon offers none.
    let migrator: StoreMigrator?
    /// What `status` says about the session-lock watcher.
    let sessionLockWatcherStatus: @Sendable () -> String

    public init(vault: Vault, config: Config, configPath: String, storeReason: String, socketPath: String, logger: Logger, audit: AuditLog,
                migrator: StoreMigrator? = nil, sessionLockWatcherStatus: @escaping @Sendable () -> String = { "off: not available in this version" }) {
        self.vault = vault
        self.config = Mutex(config)
        self.configPath = configPath
        self.storeReason = Mutex(storeReason)
        self.migrator = migrator
        self.sessionLockWatcherStatus = sessionLockWatcherStatus
        self.socketPath = socketPath
        self.logger = logger
        self.audit = audit
    }

    /// Replaces the config (after a successful SIGHUP reload).
    public func replaceConfig(_ new: Config) { config.withLock { $0 = new } }

    var currentConfig: Config { config.withLock { $0 } }

    /// Handles one request object and returns the response payload.
    func handle(_ request: JSONObject, id: JSON, peer: Peer) -> [UInt8] {
        do throws(VaultError) {
            guard let opName = request["op"]?.stringValue else { throw VaultError(.usage, "request has no \"op\"") }
            guard let op = Operation(rawValue: opName) else { throw VaultError(.usage, "unknown operation \"\(ItemName.printable(opName))\"") }
            let result = try perform(op, request, peer: peer)
            return Message.success(id: id, result: result)
        } catch {
            if error.code == .failure { logger.warning("request failed: \(error.message)") }
            return Message.failure(id: id, error)
        }
    }

    // MARK: - Parameters

    private func string(_ r: JSONObject, _ key: String) throws(VaultError) -> String? {
        guard let v = r[key], !v.isNull else { return nil }
        guard let s = v.stringValue else { throw VaultError(.usage, "\"\(key)\" must be a string") }
        return s
    }

    private func itemKey(_ r: JSONObject, kind: ItemKind = .token) throws(VaultError) -> ItemKey {
        guard let provider = try string(r, "provider") else { throw VaultError(.usage, "request needs \"provider\"") }
        try ItemName.validate(provider, what: "provider")
        let account = try string(r, "account") ?? ItemName.defaultAccount
        try ItemName.validate(account, what: "account")
        return ItemKey(provider: provider, account: account, kind: kind)
    }

    private func passphrase(_ r: JSONObject, _ key: String) throws(VaultError) -> SecureBytes? {
        guard let text = try string(r, key) else { return nil }
        guard !text.isEmpty else { throw VaultError(.usage, "the passphrase is empty") }
        do { return try SecureBytes(copying: Array(text.utf8)) } catch { throw VaultError(.failure, "cannot hold the passphrase in guarded memory") }
    }

    private func requiredPassphrase(_ r: JSONObject, _ key: String) throws(VaultError) -> SecureBytes {
        guard let p = try passphrase(r, key) else { throw VaultError(.usage, "request needs \"\(key)\"") }
        return p
    }

    // MARK: - Operations

    private func perform(_ op: Operation, _ r: JSONObject, peer: Peer) throws(VaultError) -> JSON {
        switch op {
        case .hello:
            return .object(JSONObject([("protocol", .number(Double(protocolVersion))), ("server", "tokenvaultd")]))
        case .token: return try token(r, peer: peer)
        case .list: return list()
        case .add: return try add(r, peer: peer)
        case .revoke: return try revoke(r, peer: peer)
        case .report401: return try report401(r, peer: peer)
        case .status: return status()
        case .lock:
            vault.lock()
            logger.info("vault locked by pid \(peer.pid)")
            return status()
        case .unlock:
            try vault.unlock(passphrase: try passphrase(r, "passphrase"))
            logger.info("vault unlocked by pid \(peer.pid)")
            return status()
        case .initialize:
            try vault.initialize(passphrase: try passphrase(r, "passphrase"))
            logger.info("vault created by pid \(peer.pid)")
            return status()
        case .passphraseSet:
            try vault.setPassphrase(try requiredPassphrase(r, "passphrase"))
            logger.info("passphrase set by pid \(peer.pid)")
            return status()
        case .passphraseChange:
            try vault.changePassphrase(old: try requiredPassphrase(r, "old"), new: try requiredPassphrase(r, "new"))
            logger.info("passphrase changed by pid \(peer.pid)")
            return status()
        case .passphraseRemove:
            try vault.removePassphrase(current: try requiredPassphrase(r, "passphrase"))
            logger.info("passphrase removed by pid \(peer.pid)")
            return status()
        case .migrate: return try migrate(r, peer: peer)
        }
    }

    /// Enforces a provider's `allowed_clients` (keychain access groups' analogue).
    private func checkAllowed(_ key: ItemKey, peer: Peer) throws(VaultError) {
        guard let allowed = currentConfig.providers[key.provider]?.allowedClients else { return }
        guard let exe = peer.executable, allowed.contains(exe) else {
            audit.record("denied", provider: key.provider, account: key.account, pid: peer.pid, exe: peer.executable)
            logger.warning("denied \(key) to pid \(peer.pid) (\(peer.executable ?? "unknown executable")): not in allowed_clients")
            throw VaultError(.denied, "\(peer.executable ?? "this program") is not allowed to get tokens of \(key.provider) (allowed_clients)")
        }
    }

    private func token(_ r: JSONObject, peer: Peer) throws(VaultError) -> JSON {
        let key = try itemKey(r)
        var minValidity = 0.0
        if let v = r["min_validity"], !v.isNull {
            guard let n = v.numberValue, n >= 0, n < 86400 * 365 else { throw VaultError(.usage, "\"min_validity\" must be a number of seconds ≥ 0") }
            minValidity = n
        }
        try checkAllowed(key, peer: peer)
        let result = try vault.withSecrets(key) { (item, plain) throws(VaultError) -> JSON in
            if item.status == .needsReauth {
                throw VaultError(.needsReauth, "\(key) needs a new login (vaultctl login \(key.provider))")
            }
            if let expiresAt = item.expiresAt {
                let left = expiresAt - WallClock.now()
                if left <= minValidity {
                    let when = left <= 0 ? "expired at \(WallClock.rfc3339(expiresAt))" : "expires in \(Int(left)) s, sooner than the \(Int(minValidity)) s asked for"
                    throw VaultError(.needsReauth, "the token of \(key) \(when) and cannot be refreshed (\(refreshNote(key) ?? "no refresh")); log in again or add a new token")
                }
            }
            guard let fields = try? JSON.parse(plain), let access = fields["access_token"]?.stringValue else {
                throw VaultError(.failure, "\(key) holds a damaged token record")
            }
            var o = JSONObject([("provider", .string(key.provider)), ("account", .string(key.account)),
                                ("access_token", .string(access)), ("token_type", "Bearer"),
                                ("expires_at", item.expiresAt.map { .string(WallClock.rfc3339($0)) } ?? .null),
                                ("expires_at_unix", item.expiresAt.map { .number($0.rounded(.down)) } ?? .null)])
            if let scope = fields["scope"]?.stringValue { o["scope"] = .string(scope) }
            return .object(o)
        }
        audit.record("served", provider: key.provider, account: key.account, pid: peer.pid, exe: peer.executable)
        return result
    }

    /// Why `key` cannot be refreshed, or nil if it could be.
    func refreshNote(_ key: ItemKey) -> String? {
        guard let p = currentConfig.providers[key.provider] else { return "provider not in config" }
        if p.tokenEndpoint == nil && p.issuer == nil && p.preset == nil { return "provider has no token endpoint" }
        return "automatic refresh is not available in this version"
    }

    private func state(of item: StoredItem, readable: Bool, now: Double) -> ItemState {
        if !readable { return .locked }
        if item.status == .needsReauth { return .needsReauth }
        if let e = item.expiresAt, e <= now { return .expired }
        return .valid
    }

    private func list() -> JSON {
        let now = WallClock.now()
        let backend = vault.store.backendName
        let items: [JSON] = vault.list().filter { $0.item.key.kind == .token }.map { entry in
            let item = entry.item
            let note = refreshNote(item.key)
            var o = JSONObject([("provider", .string(item.key.provider)), ("account", .string(item.key.account)),
                                ("kind", .string(item.key.kind.rawValue)), ("mode", .string(item.mode.rawValue)),
                                ("state", .string(state(of: item, readable: entry.readable, now: now).rawValue)),
                                ("expires_at", item.expiresAt.map { .string(WallClock.rfc3339($0)) } ?? .null),
                                ("expires_at_unix", item.expiresAt.map { .number($0.rounded(.down)) } ?? .null),
                                ("backend", .string(backend)), ("refreshable", .bool(note == nil))])
            if let note { o["note"] = .string(note) }
            return .object(o)
        }
        return .object(JSONObject([("items", .array(items))]))
    }

    private func add(_ r: JSONObject, peer: Peer) throws(VaultError) -> JSON {
        let key = try itemKey(r)
        guard let body = r["token_response"] else { throw VaultError(.usage, "request needs \"token_response\"") }
        let response = try TokenResponse(validating: body)
        let provider = currentConfig.providers[key.provider]
        var mode = provider?.defaultMode ?? .default
        if let m = try string(r, "mode") {
            guard let parsed = AccessMode(rawValue: m) else { throw VaultError(.usage, "unknown mode \"\(ItemName.printable(m))\"; modes: \(AccessMode.allNames)") }
            mode = parsed
        }
        let now = WallClock.now()
        let lifetime = response.expiresIn ?? provider?.assumeLifetimeSeconds
        var fields = response.fields
        fields["obtained_at"] = .number(now.rounded(.down))
        var payload = JSON.object(fields).serialized()
        defer { secureZero(&payload) }
        let item = try vault.put(key, mode: mode, secrets: payload, expiresAt: lifetime.map { now + $0 })
        audit.record("added", provider: key.provider, account: key.account, pid: peer.pid, exe: peer.executable)
        logger.info("added \(key) (\(mode.rawValue)) for pid \(peer.pid)")
        return .object(JSONObject([("provider", .string(key.provider)), ("account", .string(key.account)),
                                   ("mode", .string(item.mode.rawValue)),
                                   ("expires_at", item.expiresAt.map { .string(WallClock.rfc3339($0)) } ?? .null),
                                   ("refreshable", .bool(refreshNote(key) == nil))]))
    }

    private func revoke(_ r: JSONObject, peer: Peer) throws(VaultError) -> JSON {
        let key = try itemKey(r)
        _ = try vault.lookup(key)
        let localOnly = r["local_only"]?.boolValue ?? false
        let hasEndpoint = currentConfig.providers[key.provider]?.revocationEndpoint != nil
        try vault.delete(key)
        audit.record("revoked", provider: key.provider, account: key.account, pid: peer.pid, exe: peer.executable)
        logger.info("deleted \(key) for pid \(peer.pid)")
        let remote: String
        if localOnly { remote = "skipped (--local-only)" } else if hasEndpoint { remote = "not attempted: remote revocation is not available in this version" } else { remote = "none (provider has no revocation endpoint)" }
        return .object(JSONObject([("deleted", true), ("remote", .string(remote))]))
    }

    private func report401(_ r: JSONObject, peer: Peer) throws(VaultError) -> JSON {
        let key = try itemKey(r)
        _ = try vault.lookup(key)
        try checkAllowed(key, peer: peer)
        // No refresh is possible here, so the token the server refused is dead.
        try vault.setStatus(key, .needsReauth)
        audit.record("report-401", provider: key.provider, account: key.account, pid: peer.pid, exe: peer.executable)
        logger.info("\(key) marked needs-reauth after a 401 reported by pid \(peer.pid)")
        return .object(JSONObject([("state", .string(ItemState.needsReauth.rawValue))]))
    }

    /// `migrate` (docs/stores.md): moves the vault to the store named by `to`.
    private func migrate(_ r: JSONObject, peer: Peer) throws(VaultError) -> JSON {
        guard let migrator else { throw VaultError(.usage, "this daemon cannot migrate its store") }
        guard let to = try string(r, "to") else { throw VaultError(.usage, "request needs \"to\": sqlite or secret-service") }
        guard let target = StoreMarker.Backend(rawValue: to) else { throw VaultError(.usage, "\"to\" must be sqlite or secret-service") }
        logger.info("migration to the \(to) store started by pid \(peer.pid)")
        let outcome: StoreMigrator.Outcome
        do { outcome = try migrator.migrate(vault, to: target) } catch {
            logger.warning("migration to the \(to) store failed: \(error.message)")
            throw error
        }
        storeReason.withLock { $0 = "migrated from the \(outcome.from) store by vaultctl migrate at \(WallClock.rfc3339(WallClock.now()))" }
        logger.info("migrated \(outcome.report.items) item(s) from the \(outcome.from) store to the \(outcome.to) store in \(outcome.seconds) s")
        if let note = outcome.sourceNote { logger.warning(note) }
        var o = JSONObject([("from", .string(outcome.from)), ("to", .string(outcome.to)), ("items", .number(Double(outcome.report.items))),
                            ("records", .number(Double(outcome.report.records))), ("vault_key_moved", .bool(outcome.report.vaultKeyMoved)),
                            ("seconds", .number((outcome.seconds * 1000).rounded() / 1000)), ("source_removed", .bool(outcome.sourceNote == nil))])
        if let note = outcome.sourceNote { o["note"] = .string(note) }
        o["status"] = status()
        return .object(o)
    }

    private func status() -> JSON {
        let s = vault.status
        return .object(JSONObject([
            ("lock_state", .string(s.lockState.rawValue)), ("initialized", .bool(s.initialized)),
            ("has_passphrase", .bool(s.hasPassphrase)), ("backend", .string(s.backend)),
            ("backend_reason", .string(storeReason.withLock { $0 })), ("store", .string(s.location)),
            ("waiting_for_store", .bool(s.waitingForStore)), ("migrating", .bool(s.migrating)),
            ("items", .number(Double(s.itemCount))), ("socket", .string(socketPath)),
            ("config", .string(configPath)), ("audit_log", .string(audit.path)),
            ("session_lock_watcher", .string(sessionLockWatcherStatus())),
            ("protocol", .number(Double(protocolVersion))),
        ]))
    }
}
