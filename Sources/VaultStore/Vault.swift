import Synchronization
import VaultCrypto
import VaultModel

/// The sealed vault: the key hierarchy of PRODUCT.md section 3 over an
/// `ItemStore`, the lock state machine, and an in-memory index of the
/// sealed items.
///
/// Keys: the device key wraps the `always*` class keys; the vault key (from
/// the passphrase by Argon2id, or random in a 0600 file for a vault without
/// one) wraps the others; `*-this-device-only` class keys carry an inner
/// wrapping under the device key bound to the machine identity. Only class
/// keys are held in memory, in guarded memory; the vault key is used and
/// dropped. Plaintext secrets exist only inside `withSecrets`.
///
/// Thread safety: all state is behind one readers-writer lock
/// (`SharedLock`). Requests read under the shared side and never wait for
/// each other; changes take the exclusive side, which is also held across
/// store writes so that the index and the store change in the same order.
/// Argon2id runs outside it, so reads are never stalled by an unlock.
public final class Vault: Sendable {
    /// Record names in the store.
    enum Record {
        static let format = "vault.format"
        static let kdf = "vault.kdf"
        static func classKey(_ mode: AccessMode) -> String { "class-key.\(mode.rawValue)" }
    }

    struct State {
        /// Where the items live now (a migration replaces it).
        var store: any ItemStore
        /// Where the vault key of a vault without a passphrase lives now.
        var vaultKey: any VaultKeyLocation
        /// False while the store could not be read at start because it is
        /// locked (a locked Secret Service collection): the vault then waits
        /// for the store, and every item operation answers `locked`.
        var loaded: Bool
        /// A migration is copying the items: writes wait for it to end.
        var migrating: Bool = false
        var initialized: Bool
        var hasPassphrase: Bool
        var lock: LockState
        var kdf: KDFRecord?
        var classKeys: [AccessMode: SecretKey]
        var items: [ItemKey: StoredItem]
        /// Class keys whose device binding failed (another machine).
        var foreignClasses: Set<AccessMode>

        /// Item operations need the items loaded.
        func requireLoaded() throws(VaultError) {
            guard loaded else {
                throw VaultError(.locked, "the store (\(store.backendName) \(store.location)) is locked; unlock it (log in, or unlock the login keyring) and the vault opens")
            }
        }

        /// Writes need the items loaded and no migration running.
        func requireWritable() throws(VaultError) {
            try requireLoaded()
            guard !migrating else { throw VaultError(.temporary, "a store migration is running; try again when it ends") }
        }
    }

    /// The store the items live in now.
    public var store: any ItemStore { state.read { $0.store } }
    let keyFiles: KeyFiles
    let machineID: String
    let kdfParameters: PasswordHash.Parameters
    let deviceKey: Mutex<SecretKey?>
    let state: SharedLock<State>
    let kdfGate = Mutex(())
    private let lockObservers = Mutex<[@Sendable (LockState) -> Void]>([])
    /// One migration at a time.
    let migrationGate = Mutex(())

    /// Opens the vault in `store`. A vault that does not exist yet is created
    /// on the first write, without a passphrase, unless `initialize` runs first.
    /// A vault without a passphrase is unlocked at once (its first unlock is the start).
    /// A store that answers `locked` (a locked Secret Service collection) gives
    /// a vault that waits: `unlock` or `reloadIfWaiting` opens it later.
    public init(store: any ItemStore, keyFiles: KeyFiles, machineID: String, kdfParameters: PasswordHash.Parameters = .interactive) throws(VaultError) {
        self.keyFiles = keyFiles
        self.machineID = machineID
        self.kdfParameters = kdfParameters
        var device: SecretKey?
        let loaded: State
        do {
            (loaded, device) = try Self.load(store: store, vaultKey: keyFiles.vaultKey, deviceKeyPath: keyFiles.deviceKeyPath, machineID: machineID)
        } catch {
            guard error.code == .locked else { throw error }
            loaded = State(store: store, vaultKey: keyFiles.vaultKey, loaded: false, initialized: true, hasPassphrase: false,
                           lock: .lockedSinceStart, kdf: nil, classKeys: [:], items: [:], foreignClasses: [])
        }
        deviceKey = Mutex(device)
        state = SharedLock(loaded)
    }

    /// Reads the records and items of `store` and opens what the keys at hand open.
    static func load(store: any ItemStore, vaultKey: any VaultKeyLocation, deviceKeyPath: String, machineID: String) throws(VaultError) -> (State, SecretKey?) {
        let records = try store.records()
        let items = try store.allItems()
        var index: [ItemKey: StoredItem] = [:]
        for item in items { index[item.key] = item }
        let initialized = records[Record.format] != nil
        var classKeys: [AccessMode: SecretKey] = [:]
        var foreign: Set<AccessMode> = []
        var kdf: KDFRecord?
        var device: SecretKey?
        var lock = LockState.unlocked
        var hasPassphrase = false
        if initialized {
            guard let dk = try KeyFiles.load(deviceKeyPath, what: "device key") else {
                throw VaultError(.failure, "device key \(deviceKeyPath) is missing: the vault in \(store.location) cannot be opened")
            }
            device = dk
            if let kdfBytes = records[Record.kdf] {
                kdf = try KDFRecord(decoding: kdfBytes)
                hasPassphrase = true
                lock = .lockedSinceStart
                // A vault key left by an interrupted `passphrase set` wraps nothing now.
                try? vaultKey.remove()
            }
            for mode in AccessMode.allCases where mode.isWrappedByDeviceKey {
                if let key = try Self.unwrapClassKey(records, mode: mode, outer: dk, device: dk, machineID: machineID) {
                    classKeys[mode] = key
                } else {
                    foreign.insert(mode)
                }
            }
            if !hasPassphrase {
                guard let vk = try vaultKey.load() else {
                    throw VaultError(.failure, "\(vaultKey.description) is missing and the vault has no passphrase: the vault in \(store.location) cannot be opened")
                }
                for mode in AccessMode.allCases where !mode.isWrappedByDeviceKey {
                    guard records[Record.classKey(mode)] != nil else { continue }
                    if let key = try Self.unwrapClassKey(records, mode: mode, outer: vk, device: dk, machineID: machineID) {
                        classKeys[mode] = key
                    } else {
                        foreign.insert(mode)
                    }
                }
            }
        }
        return (State(store: store, vaultKey: vaultKey, loaded: true, initialized: initialized, hasPassphrase: hasPassphrase, lock: lock,
                      kdf: kdf, classKeys: classKeys, items: index, foreignClasses: foreign), device)
    }

    /// Loads the store if the vault is waiting for it (its store was locked
    /// at start). Returns true when the vault is loaded afterwards.
    @discardableResult
    public func reloadIfWaiting() throws(VaultError) -> Bool {
        try state.withLock { s throws(VaultError) -> Bool in
            guard !s.loaded else { return true }
            let (fresh, device) = try Self.load(store: s.store, vaultKey: s.vaultKey, deviceKeyPath: keyFiles.deviceKeyPath, machineID: machineID)
            if let device { deviceKey.withLock { $0 = device } }
            s = fresh
            return true
        }
    }

    // MARK: - Key hierarchy

    /// Opens the record of `mode`'s class key: outer layer under `outer`,
    /// then for this-device-only modes the inner layer bound to the machine.
    /// Returns nil when the outer layer opens but the device binding does
    /// not (a copied store on another machine); throws `denied` when the
    /// outer layer does not open (wrong key).
    static func unwrapClassKey(_ records: [String: [UInt8]], mode: AccessMode, outer: SecretKey, device: SecretKey, machineID: String) throws(VaultError) -> SecretKey? {
        guard let blob = records[Record.classKey(mode)] else {
            throw VaultError(.failure, "the vault has no class key for \(mode.rawValue): the store is damaged")
        }
        if !mode.isThisDeviceOnly {
            do { return try AEAD.unwrap(blob, under: outer, associatedData: AssociatedData.classKey(mode)) } catch {
                throw VaultError(.denied, "class key \(mode.rawValue) did not open")
            }
        }
        let inner: [UInt8]
        do {
            inner = try AEAD.open(blob, key: outer, associatedData: AssociatedData.classKey(mode)) { Array($0) }
        } catch {
            throw VaultError(.denied, "class key \(mode.rawValue) did not open")
        }
        return try? AEAD.unwrap(inner, under: device, associatedData: AssociatedData.deviceBound(mode, machineID: machineID))
    }

    /// The record for `key` as class key of `mode`, outer layer under `outer`.
    static func wrapClassKey(_ key: SecretKey, mode: AccessMode, outer: SecretKey, device: SecretKey, machineID: String) -> [UInt8] {
        if !mode.isThisDeviceOnly {
            return AEAD.wrap(key, under: outer, associatedData: AssociatedData.classKey(mode))
        }
        let inner = AEAD.wrap(key, under: device, associatedData: AssociatedData.deviceBound(mode, machineID: machineID))
        return AEAD.seal(inner, key: outer, associatedData: AssociatedData.classKey(mode))
    }

    /// Re-seals the outer layer of every vault-key-wrapped class key record
    /// from `old` to `new`, without opening the inner layers (so it works for
    /// every record, and no item is re-encrypted).
    static func rewrapOuter(_ records: [String: [UInt8]], from old: SecretKey, to new: SecretKey) throws(VaultError) -> [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for mode in AccessMode.allCases where !mode.isWrappedByDeviceKey {
            guard let blob = records[Record.classKey(mode)] else { continue }
            do {
                let ad = AssociatedData.classKey(mode)
                out[Record.classKey(mode)] = try AEAD.open(blob, key: old, associatedData: ad) { AEAD.seal($0, key: new, associatedData: ad) }
            } catch {
                throw VaultError(.denied, "wrong passphrase")
            }
        }
        return out
    }

    private func loadOrCreateDeviceKey() throws(VaultError) -> SecretKey {
        try deviceKey.withLock { (dk: inout SecretKey?) throws(VaultError) -> SecretKey in
            if let dk { return dk }
            let key: SecretKey
            if let existing = try KeyFiles.load(keyFiles.deviceKeyPath, what: "device key") {
                key = existing
            } else {
                key = try KeyFiles.create(keyFiles.deviceKeyPath, what: "device key")
            }
            dk = key
            return key
        }
    }

    /// Creates the vault inside the state lock: class keys, their records,
    /// and the vault key (passphrase-derived, or a new key file).
    private func create(_ s: inout State, passphraseKey: (SecretKey, KDFRecord)?) throws(VaultError) {
        let dk = try loadOrCreateDeviceKey()
        let vk: SecretKey
        if let (key, _) = passphraseKey { vk = key } else { vk = try s.vaultKey.create() }
        var records: [String: [UInt8]] = [Record.format: [1]]
        var keys: [AccessMode: SecretKey] = [:]
        for mode in AccessMode.allCases {
            let ck: SecretKey
            do { ck = try SecretKey.random() } catch { throw VaultError(.failure, "cannot create class keys: \(error)") }
            keys[mode] = ck
            records[Record.classKey(mode)] = Self.wrapClassKey(ck, mode: mode, outer: mode.isWrappedByDeviceKey ? dk : vk, device: dk, machineID: machineID)
        }
        if let (_, kdf) = passphraseKey { records[Record.kdf] = kdf.encoded() }
        try s.store.apply(StoreChange(putRecords: records))
        s.initialized = true
        s.hasPassphrase = passphraseKey != nil
        s.kdf = passphraseKey?.1
        s.classKeys = keys
        s.foreignClasses = []
        s.lock = .unlocked
    }

    /// Derives a vault key from a passphrase. One derivation at a time: each
    /// takes 64 MiB, so many clients guessing at once queue instead of
    /// exhausting memory.
    private func deriveKey(_ passphrase: SecureBytes, _ kdf: KDFRecord) throws(VaultError) -> SecretKey {
        try kdfGate.withLock { _ throws(VaultError) -> SecretKey in
            do { return try PasswordHash.deriveKey(passphrase: passphrase, salt: kdf.salt, parameters: kdf.parameters) } catch {
                throw VaultError(.failure, "cannot derive the vault key: \(error)")
            }
        }
    }

    private func newKDF() -> KDFRecord {
        KDFRecord(salt: randomBytes(PasswordHash.saltBytes), parameters: kdfParameters)
    }

    // MARK: - Status

    /// A snapshot for `vaultctl status`.
    public struct Status: Sendable {
        public let initialized: Bool
        public let hasPassphrase: Bool
        public let lockState: LockState
        public let itemCount: Int
        public let backend: String
        public let location: String
        /// The store could not be read at start (locked) and the vault waits for it.
        public let waitingForStore: Bool
        /// A migration is copying the items.
        public let migrating: Bool
    }

    /// The current state.
    public var status: Status {
        state.read { s in
            Status(initialized: s.initialized, hasPassphrase: s.hasPassphrase, lockState: s.lock, itemCount: s.items.count,
                   backend: s.store.backendName, location: s.store.location, waitingForStore: !s.loaded, migrating: s.migrating)
        }
    }

    /// The lock state.
    public var lockState: LockState { state.read { $0.lock } }

    // MARK: - Lock and unlock

    /// Creates the vault with a passphrase (`vaultctl init`). Fails if a vault exists.
    public func initialize(passphrase: SecureBytes?) throws(VaultError) {
        let kdf = newKDF()
        let derived = try passphrase.map { p throws(VaultError) in (try deriveKey(p, kdf), kdf) }
        try state.withLock { s throws(VaultError) in
            try s.requireWritable()
            guard !s.initialized else { throw VaultError(.failure, "a vault already exists in \(s.store.location)") }
            try create(&s, passphraseKey: derived)
        }
    }

    /// Unlocks: with the passphrase for a vault that has one, without for one
    /// that does not. A wrong passphrase is a `denied` error and changes nothing.
    public func unlock(passphrase: SecureBytes?) throws(VaultError) {
        try reloadIfWaiting()
        let (initialized, hasPassphrase, kdf, store, vaultKey) = state.read { ($0.initialized, $0.hasPassphrase, $0.kdf, $0.store, $0.vaultKey) }
        guard initialized else {
            if passphrase != nil { throw VaultError(.usage, "the vault has no passphrase yet; set one with `vaultctl passphrase set`") }
            return
        }
        let vk: SecretKey
        if hasPassphrase, let kdf {
            guard let passphrase else { throw VaultError(.usage, "this vault has a passphrase: give it to unlock") }
            vk = try deriveKey(passphrase, kdf)
        } else {
            if passphrase != nil { throw VaultError(.usage, "this vault has no passphrase; unlock it without one") }
            guard let key = try vaultKey.load() else {
                throw VaultError(.failure, "\(vaultKey.description) is missing")
            }
            vk = key
        }
        let dk = try loadOrCreateDeviceKey()
        let records = try store.records()
        var opened: [AccessMode: SecretKey] = [:]
        var foreign: Set<AccessMode> = []
        for mode in AccessMode.allCases where !mode.isWrappedByDeviceKey {
            guard records[Record.classKey(mode)] != nil else { continue }
            do throws(VaultError) {
                if let key = try Self.unwrapClassKey(records, mode: mode, outer: vk, device: dk, machineID: machineID) {
                    opened[mode] = key
                } else {
                    foreign.insert(mode)
                }
            } catch {
                throw VaultError(.denied, hasPassphrase ? "wrong passphrase" : "the vault key does not open the vault: \(vaultKey.description) belongs to another vault")
            }
        }
        state.withLock { s in
            for (mode, key) in opened { s.classKeys[mode] = key }
            s.foreignClasses.formUnion(foreign)
            s.lock = .unlocked
        }
        notifyLockStateChanged()
    }

    /// Registers `observer`, called (outside the vault's lock) after every
    /// `lock()` and `unlock()`, whoever called them: the refresh engine
    /// re-plans when `when-unlocked*` items become readable or unreadable.
    public func observeLockState(_ observer: @escaping @Sendable (LockState) -> Void) {
        lockObservers.withLock { $0.append(observer) }
    }

    private func notifyLockStateChanged() {
        let state = lockState
        for observer in lockObservers.withLock({ $0 }) { observer(state) }
    }

    /// Locks: wipes the `when-unlocked*` class keys (their guarded memory is
    /// zeroed and freed as the last reference goes); `after-first-unlock*`
    /// keys stay until the daemon stops. Before the first unlock it changes nothing.
    public func lock() {
        let changed = state.withLock { s -> Bool in
            guard s.lock == .unlocked, s.initialized else { return false }
            for mode in AccessMode.allCases where mode.availability == .whenUnlocked { s.classKeys[mode] = nil }
            s.lock = .locked
            return true
        }
        if changed { notifyLockStateChanged() }
    }

    // MARK: - Passphrase

    /// Adds a passphrase to a vault without one (creating the vault if needed).
    /// Needs the vault unlocked. Class keys are re-wrapped, no item is re-encrypted.
    public func setPassphrase(_ passphrase: SecureBytes) throws(VaultError) {
        let kdf = newKDF()
        let newKey = try deriveKey(passphrase, kdf)
        let leftover = try state.withLock { s throws(VaultError) -> (any VaultKeyLocation)? in
            try s.requireWritable()
            guard s.initialized else {
                try create(&s, passphraseKey: (newKey, kdf))
                return nil
            }
            guard !s.hasPassphrase else { throw VaultError(.usage, "the vault already has a passphrase; use `vaultctl passphrase change`") }
            guard let oldKey = try s.vaultKey.load() else {
                throw VaultError(.failure, "\(s.vaultKey.description) is missing")
            }
            var records = try Self.rewrapOuter(try s.store.records(), from: oldKey, to: newKey)
            records[Record.kdf] = kdf.encoded()
            try s.store.apply(StoreChange(putRecords: records))
            s.hasPassphrase = true
            s.kdf = kdf
            return s.vaultKey
        }
        // The store no longer needs it; a crash before this line leaves a key that wraps nothing.
        do { try leftover?.remove() } catch { /* removed at the next start */ }
    }

    /// Replaces the passphrase; the old one must be right.
    public func changePassphrase(old: SecureBytes, new: SecureBytes) throws(VaultError) {
        guard let oldKDF = state.read({ $0.kdf }) else { throw VaultError(.usage, "the vault has no passphrase; use `vaultctl passphrase set`") }
        let oldKey = try deriveKey(old, oldKDF)
        let kdf = newKDF()
        let newKey = try deriveKey(new, kdf)
        try state.withLock { s throws(VaultError) in
            try s.requireWritable()
            guard s.kdf == oldKDF else { throw VaultError(.temporary, "the passphrase changed meanwhile; try again") }
            var records = try Self.rewrapOuter(try s.store.records(), from: oldKey, to: newKey)
            records[Record.kdf] = kdf.encoded()
            try s.store.apply(StoreChange(putRecords: records))
            s.kdf = kdf
        }
    }

    /// Removes the passphrase; the vault key then sits beside the device key.
    /// Deletes every `when-passcode-set-this-device-only` item, as the spec says.
    public func removePassphrase(current: SecureBytes) throws(VaultError) {
        guard let oldKDF = state.read({ $0.kdf }) else { throw VaultError(.usage, "the vault has no passphrase") }
        let oldKey = try deriveKey(current, oldKDF)
        // Verify before writing anything.
        let (store, vaultKey) = state.read { ($0.store, $0.vaultKey) }
        _ = try Self.rewrapOuter(try store.records(), from: oldKey, to: oldKey)
        let newKey = try vaultKey.create()
        try state.withLock { s throws(VaultError) in
            try s.requireWritable()
            guard s.kdf == oldKDF else { throw VaultError(.temporary, "the passphrase changed meanwhile; try again") }
            let records = try Self.rewrapOuter(try s.store.records(), from: oldKey, to: newKey)
            let doomed = s.items.values.filter { $0.mode == .whenPasscodeSetThisDeviceOnly }.map(\.key)
            try s.store.apply(StoreChange(deleteItems: doomed, putRecords: records, deleteRecords: [Record.kdf]))
            for key in doomed { s.items[key] = nil }
            s.hasPassphrase = false
            s.kdf = nil
        }
    }

    // MARK: - Items

    /// Seals `secrets` under the class key of `mode` and stores the item,
    /// replacing any item with the same key. Creates the vault on first use.
    @discardableResult
    public func put(_ key: ItemKey, mode: AccessMode, secrets: [UInt8], expiresAt: Double?, status: ItemStatus = .ok) throws(VaultError) -> StoredItem {
        try ItemName.validate(key.provider, what: "provider")
        try ItemName.validate(key.account, what: "account")
        return try state.withLock { s throws(VaultError) -> StoredItem in
            try s.requireWritable()
            if !s.initialized { try create(&s, passphraseKey: nil) }
            if mode == .whenPasscodeSetThisDeviceOnly && !s.hasPassphrase {
                throw VaultError(.locked, "mode \(mode.rawValue) can only be stored while the vault has a passphrase (vaultctl passphrase set)")
            }
            let classKey = try Self.classKey(s, mode: mode, for: key)
            let now = WallClock.now()
            let item = StoredItem(key: key, mode: mode, expiresAt: expiresAt, status: status,
                                  createdAt: s.items[key]?.createdAt ?? now, updatedAt: now,
                                  sealed: AEAD.seal(secrets, key: classKey, associatedData: AssociatedData.item(key, mode: mode)))
            try s.store.apply(StoreChange(putItems: [item]))
            s.items[key] = item
            return item
        }
    }

    /// One entry of `putBatch`.
    public struct NewItem: Sendable {
        public var key: ItemKey
        public var mode: AccessMode
        public var secrets: [UInt8]
        public var expiresAt: Double?

        public init(key: ItemKey, mode: AccessMode, secrets: [UInt8], expiresAt: Double?) {
            self.key = key
            self.mode = mode
            self.secrets = secrets
            self.expiresAt = expiresAt
        }
    }

    /// Seals and stores many items in one transaction (imports, migration):
    /// all of them land, or none.
    public func putBatch(_ entries: [NewItem]) throws(VaultError) {
        for e in entries {
            try ItemName.validate(e.key.provider, what: "provider")
            try ItemName.validate(e.key.account, what: "account")
        }
        try state.withLock { s throws(VaultError) in
            try s.requireWritable()
            if !s.initialized { try create(&s, passphraseKey: nil) }
            let now = WallClock.now()
            var items: [StoredItem] = []
            items.reserveCapacity(entries.count)
            for e in entries {
                if e.mode == .whenPasscodeSetThisDeviceOnly && !s.hasPassphrase {
                    throw VaultError(.locked, "mode \(e.mode.rawValue) can only be stored while the vault has a passphrase (vaultctl passphrase set)")
                }
                let classKey = try Self.classKey(s, mode: e.mode, for: e.key)
                items.append(StoredItem(key: e.key, mode: e.mode, expiresAt: e.expiresAt, status: .ok,
                                        createdAt: s.items[e.key]?.createdAt ?? now, updatedAt: now,
                                        sealed: AEAD.seal(e.secrets, key: classKey, associatedData: AssociatedData.item(e.key, mode: e.mode))))
            }
            try s.store.apply(StoreChange(putItems: items))
            for item in items { s.items[item.key] = item }
        }
    }

    /// The class key for `mode` if the lock state allows it now.
    private static func classKey(_ s: State, mode: AccessMode, for key: ItemKey) throws(VaultError) -> SecretKey {
        guard mode.isReadable(in: s.lock) else {
            throw VaultError(.locked, "\(key) is locked: mode \(mode.rawValue) needs the vault unlocked (vaultctl unlock)")
        }
        if s.foreignClasses.contains(mode) {
            throw VaultError(.failure, "\(key) is bound to another machine (\(mode.rawValue)) and cannot be opened here")
        }
        guard let classKey = s.classKeys[mode] else {
            throw VaultError(.locked, "\(key) is locked: mode \(mode.rawValue) needs the vault unlocked (vaultctl unlock)")
        }
        return classKey
    }

    /// Opens `key`'s secrets and passes them to `body` in a buffer wiped
    /// when `body` returns. Throws `notFound`, `locked`, or a `failure` when
    /// the sealed record does not authenticate (tampered or moved).
    public func withSecrets<R>(_ key: ItemKey, _ body: (StoredItem, UnsafeRawBufferPointer) throws(VaultError) -> R) throws(VaultError) -> R {
        let (item, classKey) = try state.read { s throws(VaultError) -> (StoredItem, SecretKey) in
            try s.requireLoaded()
            guard let item = s.items[key] else { throw VaultError(.notFound, "no item \(key)") }
            return (item, try Self.classKey(s, mode: item.mode, for: key))
        }
        do {
            return try AEAD.open(item.sealed, key: classKey, associatedData: AssociatedData.item(key, mode: item.mode)) { plain in
                try body(item, plain)
            }
        } catch let e as VaultError {
            throw e
        } catch {
            throw VaultError(.failure, "\(key) cannot be opened: its sealed record failed authentication (the store was modified, or the record belongs to another item)")
        }
    }

    /// The item's metadata, if it exists.
    public func item(_ key: ItemKey) -> StoredItem? { state.read { $0.items[key] } }

    /// Whether an item of `mode` can be stored now (lock state, class key,
    /// and a passphrase for `when-passcode-set-this-device-only`).
    public func canStore(_ mode: AccessMode) -> Bool {
        state.read { s in
            if !s.initialized { return mode != .whenPasscodeSetThisDeviceOnly }
            if mode == .whenPasscodeSetThisDeviceOnly && !s.hasPassphrase { return false }
            return mode.isReadable(in: s.lock) && s.classKeys[mode] != nil && !s.foreignClasses.contains(mode)
        }
    }

    /// Whether `key` exists and its mode and class key allow reading it now.
    public func isReadable(_ key: ItemKey) -> Bool {
        state.read { s in
            guard let item = s.items[key] else { return false }
            return item.mode.isReadable(in: s.lock) && s.classKeys[item.mode] != nil && !s.foreignClasses.contains(item.mode)
        }
    }

    /// The keys of every item.
    public var keys: [ItemKey] { state.read { Array($0.items.keys) } }

    /// The item's metadata: `notFound` when there is none, `locked` while
    /// the vault waits for a locked store (never a false "not found").
    public func lookup(_ key: ItemKey) throws(VaultError) -> StoredItem {
        try state.read { s throws(VaultError) -> StoredItem in
            try s.requireLoaded()
            guard let item = s.items[key] else { throw VaultError(.notFound, "no item \(key)") }
            return item
        }
    }

    /// Every item's metadata with whether it can be read now, sorted.
    public func list() -> [(item: StoredItem, readable: Bool)] {
        state.read { s in
            s.items.values.sorted { ($0.key.provider, $0.key.account, $0.key.kind.rawValue) < ($1.key.provider, $1.key.account, $1.key.kind.rawValue) }
                .map { ($0, $0.mode.isReadable(in: s.lock) && s.classKeys[$0.mode] != nil && !s.foreignClasses.contains($0.mode)) }
        }
    }

    /// Deletes an item (needs no key, works in every lock state).
    /// Returns false if there was none.
    @discardableResult
    public func delete(_ key: ItemKey) throws(VaultError) -> Bool {
        try state.withLock { s throws(VaultError) -> Bool in
            try s.requireWritable()
            guard s.items[key] != nil else { return false }
            try s.store.apply(StoreChange(deleteItems: [key]))
            s.items[key] = nil
            return true
        }
    }

    /// Updates an item's status (for example `needs-reauth`) without touching its seal.
    public func setStatus(_ key: ItemKey, _ status: ItemStatus) throws(VaultError) {
        try state.withLock { s throws(VaultError) in
            try s.requireWritable()
            guard var item = s.items[key] else { throw VaultError(.notFound, "no item \(key)") }
            item.status = status
            try s.store.apply(StoreChange(putItems: [item]))
            s.items[key] = item
        }
    }

    // MARK: - Migration

    /// What a migration copied.
    public struct MigrationReport: Sendable {
        /// Items copied (every kind, every mode, `*-this-device-only` included).
        public let items: Int
        /// Key-hierarchy records copied.
        public let records: Int
        /// Whether the vault key of a vault without a passphrase moved too.
        public let vaultKeyMoved: Bool
    }

    /// Moves the vault to `target`: copies every item and key record as they
    /// are (sealed blobs and wrapped class keys; nothing is re-encrypted, the
    /// keys stay the same) and, for a vault without a passphrase, the vault
    /// key to `targetKey`. Then checks the copy: every record and item reads
    /// back byte for byte, a second `Vault` over the copy opens with the keys
    /// at hand, and every copied item opens under this vault's class keys
    /// where they are in memory. Only then `commit` runs (the caller makes
    /// the switch durable there, e.g. a marker file) and the vault serves
    /// from `target`.
    ///
    /// Reads go on during the copy; writes answer `temporary` until it ends.
    /// A failure before `commit` returns leaves the vault on its source,
    /// untouched, and removes what it copied where it can. Removing the
    /// source afterwards is the caller's job.
    public func migrate(to target: any ItemStore, vaultKey targetKey: any VaultKeyLocation,
                        commit: () throws(VaultError) -> Void) throws(VaultError) -> MigrationReport {
        try migrationGate.withLock { _ throws(VaultError) -> MigrationReport in
            let (source, sourceKey, hasPassphrase, initialized) = try state.withLock { s throws(VaultError) in
                try s.requireWritable()
                s.migrating = true
                return (s.store, s.vaultKey, s.hasPassphrase, s.initialized)
            }
            var switched = false
            defer { if !switched { state.withLock { $0.migrating = false } } }
            let records = try source.records()
            let items = try source.allItems()
            var keyMoved = false
            do throws(VaultError) {
                if initialized && !hasPassphrase {
                    guard let vk = try sourceKey.load() else { throw VaultError(.failure, "\(sourceKey.description) is missing") }
                    try targetKey.save(vk)
                    keyMoved = true
                }
                try target.apply(StoreChange(putItems: items, putRecords: records))
                try verifyCopy(target, targetKey: targetKey, records: records, items: items)
            } catch {
                if keyMoved { try? targetKey.remove() }
                try? target.destroy()
                throw VaultError(error.code, "the migration to the \(target.backendName) store failed and the vault stays in \(source.backendName) \(source.location), complete: \(error.message)")
            }
            try state.withLock { s throws(VaultError) in
                try commit()
                s.store = target
                s.vaultKey = targetKey
                s.migrating = false
            }
            switched = true
            return MigrationReport(items: items.count, records: records.count, vaultKeyMoved: keyMoved)
        }
    }

    /// The checks of `migrate` on the copy.
    private func verifyCopy(_ target: any ItemStore, targetKey: any VaultKeyLocation, records: [String: [UInt8]], items: [StoredItem]) throws(VaultError) {
        let copiedRecords = try target.records()
        for (name, value) in records where copiedRecords[name] != value {
            throw VaultError(.failure, "key record \(name) did not read back from the copy as written")
        }
        guard copiedRecords.count == records.count else { throw VaultError(.failure, "the copy holds \(copiedRecords.count) key records, expected \(records.count)") }
        var copied: [ItemKey: StoredItem] = [:]
        for item in try target.allItems() { copied[item.key] = item }
        guard copied.count == items.count else { throw VaultError(.failure, "the copy holds \(copied.count) items, expected \(items.count)") }
        for item in items where copied[item.key] != item {
            throw VaultError(.failure, "item \(item.key) did not read back from the copy as written")
        }
        // A second vault over the copy, as the next daemon start would open it.
        let second = try Vault(store: target, keyFiles: keyFiles.keepingVaultKey(in: targetKey), machineID: machineID, kdfParameters: kdfParameters)
        for entry in second.list() where entry.readable {
            try second.withSecrets(entry.item.key) { (_, _) throws(VaultError) in }
        }
        // Every copied item under the class keys this vault holds now.
        let keys = state.read { $0.classKeys }
        for item in copied.values {
            guard let key = keys[item.mode] else { continue }
            do {
                try AEAD.open(item.sealed, key: key, associatedData: AssociatedData.item(item.key, mode: item.mode)) { _ in }
            } catch {
                throw VaultError(.failure, "the copy of \(item.key) does not open")
            }
        }
    }
}

/// The Argon2id salt and costs of a vault with a passphrase.
struct KDFRecord: Sendable, Equatable {
    var salt: [UInt8]
    var parameters: PasswordHash.Parameters

    init(salt: [UInt8], parameters: PasswordHash.Parameters) {
        self.salt = salt
        self.parameters = parameters
    }

    init(decoding bytes: [UInt8]) throws(VaultError) {
        guard let json = try? JSON.parse(bytes), json["alg"]?.stringValue == "argon2id13",
              let saltHex = json["salt"]?.stringValue, let salt = Hex.decode(saltHex), salt.count == PasswordHash.saltBytes,
              let ops = json["ops"]?.numberValue, let mem = json["mem"]?.numberValue, ops >= 1, mem >= 1 else {
            throw VaultError(.failure, "the vault's passphrase parameters are damaged")
        }
        self.init(salt: salt, parameters: .init(opsLimit: UInt64(ops), memLimit: Int(mem)))
    }

    func encoded() -> [UInt8] {
        JSON.object(JSONObject([("alg", "argon2id13"), ("salt", .string(Hex.encode(salt))),
                                ("ops", .number(Double(parameters.opsLimit))), ("mem", .number(Double(parameters.memLimit)))])).serialized()
    }
}

/// Lowercase hexadecimal.
enum Hex {
    static func encode(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }

    static func decode(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        func v(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: return c - 48
            case 97...102: return c - 87
            case 65...70: return c - 55
            default: return nil
            }
        }
        var out: [UInt8] = []
        var i = 0
        while i < chars.count {
            guard let h = v(chars[i]), let l = v(chars[i + 1]) else { return nil }
            out.append(h << 4 | l)
            i += 2
        }
        return out
    }
}

import VaultSystem

/// File removal with the vault's error type.
enum FileSystemShim {
    static func remove(_ path: String) throws(VaultError) {
        do { try FileSystem.remove(path) } catch { throw VaultError(.failure, "\(error)") }
    }
}
