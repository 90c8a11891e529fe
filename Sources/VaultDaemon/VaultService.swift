import Synchronization
import VaultCrypto
import VaultModel
import VaultOAuth
import VaultProtocol
import VaultStore
import VaultSystem

/// Who is asking: the socket peer's credentials.
public struct Peer: Sendable {
    public let pid: Int32
    public let uid: UInt32
    /// `/proc/PID/exe` at connect time, nil if unreadable.
    public let executable: String?
    /// The connection, to notice a client that went away during a long wait.
    let connection: SocketConnection?

    public init(pid: Int32, uid: UInt32, executable: String?, connection: SocketConnection? = nil) {
        self.pid = pid
        self.uid = uid
        self.executable = executable
        self.connection = connection
    }

    /// Whether the client closed its end (Ctrl-C on `vaultctl login`).
    var hasGoneAway: Bool { connection?.peerHasClosed ?? false }
}

/// The daemon's request handler: turns protocol requests into vault
/// operations and answers. Safe to call from every connection thread.
public final class VaultService: Sendable {
    public let vault: Vault
    let logger: Logger
    let audit: AuditLog
    let providers: ProviderDirectory
    let engine: RefreshEngine
    let logins: LoginManager
    /// Why this store was chosen, for `status` (a migration changes it).
    let storeReason: Mutex<String>
    let socketPath: String
    let configPath: String
    /// How long a request waits for a refresh it needs.
    let refreshWait: Double = 30
    /// Moves the vault between stores (`migrate`); nil where the daemon offers none.
    let migrator: StoreMigrator?
    /// What `status` says about the session-lock watcher.
    let sessionLockWatcherStatus: @Sendable () -> String

    public init(vault: Vault, providers: ProviderDirectory, engine: RefreshEngine, configPath: String, storeReason: String,
                socketPath: String, logger: Logger, audit: AuditLog, migrator: StoreMigrator? = nil,
                sessionLockWatcherStatus: @escaping @Sendable () -> String = { "off: no session-lock watcher" }) {
        self.vault = vault
        self.providers = providers
        self.engine = engine
        self.logins = LoginManager(vault: vault, providers: providers, engine: engine, logger: logger, audit: audit)
        self.configPath = configPath
        self.storeReason = Mutex(storeReason)
        self.migrator = migrator
        self.sessionLockWatcherStatus = sessionLockWatcherStatus
        self.socketPath = socketPath
        self.logger = logger
        self.audit = audit
    }

    /// Replaces the config (after a successful SIGHUP reload) and re-plans refreshes.
    public func replaceConfig(_ new: Config) {
        providers.replaceConfig(new)
        engine.rescheduleAll()
    }

    var currentConfig: Config { providers.current }

    /// What an operation answers: a result to wrap in a response, or (for
    /// `token`, the hot path) the whole response frame, already written.
    enum Answer {
        case json(JSON)
        case frame([UInt8])
    }

    /// Handles one request object and returns the response frame.
    func handle(_ request: JSONObject, id: JSON, peer: Peer) -> [UInt8] {
        var payload: [UInt8]
        do throws(VaultError) {
            guard let opName = request["op"]?.stringValue else { throw VaultError(.usage, "request has no \"op\"") }
            guard let op = Operation(rawValue: opName) else { throw VaultError(.usage, "unknown operation \"\(ItemName.printable(opName))\"") }
            switch try perform(op, request, id: id, peer: peer) {
            case .frame(let frame): return frame
            case .json(let result): payload = Message.success(id: id, result: result)
            }
        } catch {
            if error.code == .failure { logger.warning("request failed: \(error.message)") }
            payload = Message.failure(id: id, error)
        }
        defer { secureZero(&payload) }
        return Frame.encode(payload)
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

    private func perform(_ op: Operation, _ r: JSONObject, id: JSON, peer: Peer) throws(VaultError) -> Answer {
        switch op {
        case .hello:
            return .json(.object(JSONObject([("protocol", .number(Double(protocolVersion))), ("server", "tokenvaultd")])))
        case .token: return .frame(try tokenFrame(r, id: id, peer: peer))
        case .list: return .json(list())
        case .add: return try .json(add(r, peer: peer))
        case .revoke: return try .json(revoke(r, peer: peer))
        case .report401: return try .json(report401(r, peer: peer))
        case .status: return .json(status())
        case .refresh: return try .json(forceRefresh(r, peer: peer))
        case .clientSecretSet: return try .json(setClientSecret(r, peer: peer))
        case .providers: return try .json(listProviders(r))
        case .loginStart:
            let key = try itemKey(r)
            var mode: AccessMode?
            if let m = try string(r, "mode") {
                guard let parsed = AccessMode(rawValue: m) else { throw VaultError(.usage, "unknown mode \"\(ItemName.printable(m))\"; modes: \(AccessMode.allNames)") }
                mode = parsed
            }
            let timeout = r["timeout"]?.numberValue ?? 300
            guard timeout >= 1, timeout <= 3600 else { throw VaultError(.usage, "\"timeout\" must be 1 to 3600 seconds") }
            return try .json(logins.start(key, mode: mode, device: r["device"]?.boolValue ?? false, timeout: timeout, peer: peer))
        case .loginWait:
            guard let id = try string(r, "session") else { throw VaultError(.usage, "request needs \"session\"") }
            return try .json(logins.wait(id, peer: peer))
        case .loginCancel:
            guard let id = try string(r, "session") else { throw VaultError(.usage, "request needs \"session\"") }
            try logins.cancel(id)
            return .json(.object(JSONObject([("cancelled", true)])))
        case .lock:
            vault.lock()
            logger.info("vault locked by pid \(peer.pid)")
            return .json(status())
        case .unlock:
            try vault.unlock(passphrase: try passphrase(r, "passphrase"))
            logger.info("vault unlocked by pid \(peer.pid)")
            return .json(status())
        case .initialize:
            try vault.initialize(passphrase: try passphrase(r, "passphrase"))
            engine.rescheduleAll()
            logger.info("vault created by pid \(peer.pid)")
            return .json(status())
        case .passphraseSet:
            try vault.setPassphrase(try requiredPassphrase(r, "passphrase"))
            engine.rescheduleAll()
            logger.info("passphrase set by pid \(peer.pid)")
            return .json(status())
        case .passphraseChange:
            try vault.changePassphrase(old: try requiredPassphrase(r, "old"), new: try requiredPassphrase(r, "new"))
            engine.rescheduleAll()
            logger.info("passphrase changed by pid \(peer.pid)")
            return .json(status())
        case .passphraseRemove:
            try vault.removePassphrase(current: try requiredPassphrase(r, "passphrase"))
            engine.rescheduleAll()
            logger.info("passphrase removed by pid \(peer.pid)")
            return .json(status())
        case .migrate: return try .json(migrate(r, peer: peer))
        }
    }

    /// Enforces a provider's `allowed_clients` (keychain access groups' analogue).
    private func checkAllowed(_ key: ItemKey, peer: Peer) throws(VaultError) {
        guard let allowed = providers.allowedClients(key.provider) else { return }
        guard let exe = peer.executable, allowed.contains(exe) else {
            audit.record("denied", provider: key.provider, account: key.account, pid: peer.pid, exe: peer.executable)
            logger.warning("denied \(key) to pid \(peer.pid) (\(peer.executable ?? "unknown executable")): not in allowed_clients")
            throw VaultError(.denied, "\(peer.executable ?? "this program") is not allowed to get tokens of \(key.provider) (allowed_clients)")
        }
    }

    /// `token`: the response frame with the access token, written straight
    /// into one buffer sized for it (no JSON tree, no copy of the frame).
    private func tokenFrame(_ r: JSONObject, id: JSON, peer: Peer) throws(VaultError) -> [UInt8] {
        let key = try itemKey(r)
        var minValidity = 0.0
        if let v = r["min_validity"], !v.isNull {
            guard let n = v.numberValue, n >= 0, n < 86400 * 365 else { throw VaultError(.usage, "\"min_validity\" must be a number of seconds ≥ 0") }
            minValidity = n
        }
        try checkAllowed(key, peer: peer)
        var refreshed = false
        while true {
            // Serve the stored token if it is valid for long enough; otherwise refresh once (single flight) and look again.
            var seen = 0.0
            let served = try vault.withSecrets(key) { (item, plain) throws(VaultError) -> [UInt8]? in
                if item.status == .needsReauth {
                    throw VaultError(.needsReauth, "\(key) needs a new login (vaultctl login \(key.provider))")
                }
                seen = item.updatedAt
                // Judged on the expiry the client is told (`expires_at_unix`, whole seconds
                // rounded down), so a client can check the promise: never less than min_validity left.
                if let expiresAt = item.expiresAt, expiresAt.rounded(.down) - WallClock.now() <= minValidity { return nil }
                guard let fields = try? JSON.parse(plain), let access = fields["access_token"]?.stringValue else {
                    throw VaultError(.failure, "\(key) holds a damaged token record")
                }
                let scope = fields["scope"]?.stringValue
                // Escaping can at most sextuple a byte; with room for the rest, the buffer never grows (and leaves no copy behind).
                let capacity = 256 + 6 * (access.utf8.count + (scope?.utf8.count ?? 0) + key.provider.utf8.count + key.account.utf8.count)
                var w = Message.successFrameWriter(id: id, capacity: capacity)
                w.field("provider", key.provider)
                w.field("account", key.account)
                w.field("access_token", access)
                w.field("token_type", "Bearer")
                if let expiresAt = item.expiresAt {
                    w.field("expires_at", WallClock.rfc3339(expiresAt))
                    w.field("expires_at_unix", expiresAt.rounded(.down))
                } else {
                    w.field("expires_at", JSON.null)
                    w.field("expires_at_unix", JSON.null)
                }
                if let scope { w.field("scope", scope) }
                w.endObject()
                w.endObject()
                return w.finish()
            }
            if let served {
                audit.record("served", provider: key.provider, account: key.account, pid: peer.pid, exe: peer.executable)
                return served
            }
            let item = vault.item(key)
            if refreshed {
                let lifetime = item.flatMap { i in i.expiresAt.map { $0 - i.updatedAt } } ?? 0
                throw VaultError(.failure, "\(key.provider) issues tokens valid for \(Int(lifetime)) s, less than the \(Int(minValidity)) s asked for")
            }
            if let note = providers.refreshNote(key.provider) {
                let now = WallClock.now()
                let when = (item?.expiresAt).map { e in
                    e <= now ? "expired at \(WallClock.rfc3339(e))" : "expires in \(Int(e - now)) s, sooner than the \(Int(minValidity)) s asked for"
                } ?? "expired"
                throw VaultError(.needsReauth, "the token of \(key) \(when) and cannot be refreshed (\(note)); log in again or add a new token")
            }
            switch engine.refresh(key, seenUpdatedAt: seen, wait: refreshWait, honourBackoff: true) {
            case .refreshed: refreshed = true
            case .alreadyFresh: continue
            case .failed(let error):
                if error.code == .temporary, let e = item?.expiresAt, e > WallClock.now() {
                    throw VaultError(.temporary, "\(key) could not be refreshed (\(error.message)); the current token expires in \(Int(e - WallClock.now())) s, sooner than the \(Int(minValidity)) s asked for")
                }
                throw error
            }
        }
    }

    /// `refresh`: refreshes now, whatever the expiry.
    private func forceRefresh(_ r: JSONObject, peer: Peer) throws(VaultError) -> JSON {
        let key = try itemKey(r)
        guard vault.item(key) != nil else { throw VaultError(.notFound, "no item \(key)") }
        if let note = providers.refreshNote(key.provider) { throw VaultError(.needsReauth, "\(key) cannot be refreshed: \(note)") }
        switch engine.refresh(key, seenUpdatedAt: nil, wait: refreshWait) {
        case .refreshed, .alreadyFresh:
            logger.info("\(key) refreshed on request of pid \(peer.pid)")
            let item = vault.item(key)
            return .object(JSONObject([("provider", .string(key.provider)), ("account", .string(key.account)),
                                       ("expires_at", (item?.expiresAt).map { .string(WallClock.rfc3339($0)) } ?? .null)]))
        case .failed(let error):
            throw error
        }
    }

    /// `client_secret_set`: keeps a provider's client secret in the vault.
    private func setClientSecret(_ r: JSONObject, peer: Peer) throws(VaultError) -> JSON {
        guard let provider = try string(r, "provider") else { throw VaultError(.usage, "request needs \"provider\"") }
        try ItemName.validate(provider, what: "provider")
        guard let secret = try string(r, "secret"), !secret.isEmpty else { throw VaultError(.badInput, "the client secret is empty") }
        let mode = currentConfig.providers[provider]?.defaultMode ?? .default
        var bytes = Array(secret.utf8)
        defer { secureZero(&bytes) }
        try vault.put(RefreshEngine.clientSecretKey(provider), mode: mode, secrets: bytes, expiresAt: nil)
        logger.info("client secret of \(provider) set by pid \(peer.pid)")
        engine.rescheduleAll()
        return .object(JSONObject([("provider", .string(provider)), ("mode", .string(mode.rawValue))]))
    }

    /// `providers`: the configured providers, resolved; with `check`, discovery is run.
    private func listProviders(_ r: JSONObject) throws(VaultError) -> JSON {
        let check = r["check"]?.boolValue ?? false
        let config = currentConfig
        let items = vault.list()
        var out: [JSON] = []
        for name in config.providers.keys.sorted() {
            let c = config.providers[name]!
            let count = items.filter { $0.item.key.provider == name && $0.item.key.kind == .token }.count
            var o = JSONObject([("provider", .string(name)), ("preset", c.preset.map { .string($0) } ?? .null),
                                ("grant", .string(c.grant)), ("client_id", c.clientID.map { .string($0) } ?? .null),
                                ("default_mode", .string((c.defaultMode ?? .default).rawValue)),
                                ("has_client_secret", .bool(vault.item(RefreshEngine.clientSecretKey(name)) != nil)),
                                ("items", .number(Double(count)))])
            if let issuer = c.issuer { o["issuer"] = .string(issuer) }
            if check || c.issuer == nil {
                do {
                    let p = try providers.profile(name)
                    o["client_auth"] = .string(p.clientAuth.rawValue)
                    o["token_endpoint"] = p.tokenEndpoint.map { .string($0) } ?? .null
                    o["revocation_endpoint"] = p.revocationEndpoint.map { .string($0) } ?? .null
                    o["authorization_endpoint"] = p.authorizationEndpoint.map { .string($0) } ?? .null
                    o["device_authorization_endpoint"] = p.deviceAuthorizationEndpoint.map { .string($0) } ?? .null
                    if check { o["check"] = .string(p.tokenEndpoint == nil ? "no token endpoint" : "ok") }
                } catch {
                    o["check"] = .string("failed: \(error.description)")
                }
            }
            out.append(.object(o))
        }
        return .object(JSONObject([("providers", .array(out))]))
    }

    /// Why `key` cannot be refreshed, or nil if it could be.
    func refreshNote(_ key: ItemKey) -> String? { providers.refreshNote(key.provider) }

    private func state(of item: StoredItem, readable: Bool, now: Double) -> ItemState {
        if !readable { return .locked }
        if item.status == .needsReauth { return .needsReauth }
        if engine.isRefreshing(item.key) { return .refreshing }
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
            if let next = engine.nextRefresh(item.key) { o["next_refresh"] = .string(WallClock.rfc3339(next)) }
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
        let item = try vault.storeTokenResponse(key, mode: mode, response, assumeLifetime: provider?.assumeLifetimeSeconds)
        engine.itemChanged(key)
        audit.record("added", provider: key.provider, account: key.account, pid: peer.pid, exe: peer.executable)
        logger.info("added \(key) (\(mode.rawValue)) for pid \(peer.pid)")
        return .object(JSONObject([("provider", .string(key.provider)), ("account", .string(key.account)),
                                   ("mode", .string(item.mode.rawValue)),
                                   ("expires_at", item.expiresAt.map { .string(WallClock.rfc3339($0)) } ?? .null),
                                   ("refreshable", .bool(refreshNote(key) == nil))]))
    }

    /// `revoke`: RFC 7009 revocation at the provider (refresh token first,
    /// then access token) when it has an endpoint, then the local delete —
    /// unless the remote revocation failed and `keep_on_failure` is set.
    private func revoke(_ r: JSONObject, peer: Peer) throws(VaultError) -> JSON {
        let key = try itemKey(r)
        _ = try vault.lookup(key)
        let localOnly = r["local_only"]?.boolValue ?? false
        let keepOnFailure = r["keep_on_failure"]?.boolValue ?? false
        var remote = "none (provider has no revocation endpoint)"
        var remoteFailed = false
        if localOnly {
            remote = "skipped (--local-only)"
        } else if currentConfig.providers[key.provider] != nil {
            do {
                remote = try revokeRemotely(key)
            } catch {
                remoteFailed = true
                remote = "failed: \(error.message)"
                logger.warning("remote revocation of \(key) failed: \(error.message)")
                if keepOnFailure {
                    throw VaultError(error.code == .locked ? .locked : .temporary,
                                     "remote revocation of \(key) failed (\(error.message)); the item was kept (--keep-on-failure)")
                }
            }
        }
        try vault.delete(key)
        engine.itemChanged(key)
        audit.record("revoked", provider: key.provider, account: key.account, pid: peer.pid, exe: peer.executable)
        logger.info("deleted \(key) for pid \(peer.pid); remote revocation: \(remote)")
        return .object(JSONObject([("deleted", true), ("remote", .string(remote)), ("remote_failed", .bool(remoteFailed))]))
    }

    /// Revokes the refresh token, then the access token, at the provider.
    private func revokeRemotely(_ key: ItemKey) throws(VaultError) -> String {
        let profile: ProviderProfile
        do { profile = try providers.profile(key.provider) } catch { throw VaultError(.temporary, error.description) }
        guard profile.revocationEndpoint != nil else { return "none (provider has no revocation endpoint)" }
        let tokens = try vault.withSecrets(key) { (_, plain) throws(VaultError) -> (String?, String?) in
            let f = try? JSON.parse(plain)
            return (f?["refresh_token"]?.stringValue, f?["access_token"]?.stringValue)
        }
        let clientSecret = try? vault.withSecrets(RefreshEngine.clientSecretKey(key.provider)) { (_, plain) throws(VaultError) -> String in
            String(decoding: plain, as: UTF8.self)
        }
        var done: [String] = []
        for (token, hint) in [(tokens.0, "refresh_token"), (tokens.1, "access_token")] {
            guard let token else { continue }
            do {
                try providers.client.revoke(profile, token: token, hint: hint, clientSecret: clientSecret)
            } catch {
                switch error {
                case .transient(let m, _, _): throw VaultError(.temporary, m)
                case .needsReauth(let m), .rejected(let m): throw VaultError(.failure, m)
                }
            }
            done.append(hint)
        }
        return "revoked " + done.joined(separator: " and ")
    }

    /// `report_401`: a server refused the token. Refresh it; if that is not
    /// possible or the provider refuses, the item needs a new login.
    private func report401(_ r: JSONObject, peer: Peer) throws(VaultError) -> JSON {
        let key = try itemKey(r)
        _ = try vault.lookup(key)
        try checkAllowed(key, peer: peer)
        audit.record("report-401", provider: key.provider, account: key.account, pid: peer.pid, exe: peer.executable)
        if providers.refreshNote(key.provider) == nil {
            switch engine.refresh(key, seenUpdatedAt: nil, wait: refreshWait, honourBackoff: true) {
            case .refreshed, .alreadyFresh:
                logger.info("\(key) refreshed after a 401 reported by pid \(peer.pid)")
                return .object(JSONObject([("state", .string(ItemState.valid.rawValue))]))
            case .failed(let error):
                if error.code == .needsReauth { return .object(JSONObject([("state", .string(ItemState.needsReauth.rawValue))])) }
                throw error
            }
        }
        // Nothing can refresh it, so the token the server refused is dead.
        try vault.setStatus(key, .needsReauth)
        engine.itemChanged(key)
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
