import VaultModel
import VaultSecretService
import VaultStore
import VaultSystem

/// The store the daemon opened, where the vault key of a vault without a
/// passphrase lives with it, and why this store (for `vaultctl status`).
public struct OpenedStore: Sendable {
    public let store: any ItemStore
    public let keyFiles: KeyFiles
    public let reason: String
}

/// Store selection (PRODUCT.md section 2, docs/stores.md): which store holds
/// the vault of a data folder, and opening it.
///
/// The rules: `store.json` (a `StoreMarker`) says where the vault lives; without
/// it, a `vault.db` that holds key records means `sqlite`; with neither there
/// is no vault yet. An explicit choice that disagrees with an existing vault
/// is refused (migrate instead). `auto` keeps an existing vault where it is,
/// refuses to start when that is a Secret Service that does not answer (no
/// silent downgrade to an empty SQLite vault), and otherwise takes the
/// Secret Service when one answers within `probeTimeout`, else SQLite.
public struct StorePlacement: Sendable {
    public let dataFolder: String
    public var probeTimeout: Duration = .milliseconds(500)
    public var callTimeout: Duration = .seconds(5)

    public init(dataFolder: String) { self.dataFolder = dataFolder }

    public var databasePath: String { dataFolder + "/vault.db" }
    var keyFiles: KeyFiles { KeyFiles(folder: dataFolder) }

    /// Where the vault lives now and how we know, or nil when there is none.
    public func existingVault() throws(VaultError) -> (backend: StoreMarker.Backend, evidence: String)? {
        if let marker = try StoreMarker.read(folder: dataFolder) {
            return (marker.backend, "\(StoreMarker.path(in: dataFolder)) says the vault lives in the \(marker.backend.rawValue) store")
        }
        if FileSystem.exists(databasePath), try !SQLiteStore(path: databasePath).records().isEmpty {
            return (.sqlite, "\(databasePath) holds a vault")
        }
        return nil
    }

    /// Opens the store for `choice` (`auto`, `sqlite`, `secret-service`) named by `source`.
    public func open(choice: String, source: String) throws(VaultError) -> OpenedStore {
        guard ["auto", "sqlite", "secret-service"].contains(choice) else {
            throw VaultError(.usage, "store \"\(ItemName.printable(choice))\" (from \(source)) must be auto, sqlite or secret-service")
        }
        let existing = try existingVault()
        if choice != "auto" {
            if let existing, existing.backend.rawValue != choice {
                throw VaultError(.usage, "\(source) asks for the \(choice) store, but \(existing.evidence); use --store \(existing.backend.rawValue) (or auto), or move the vault with `vaultctl migrate --to \(choice)`")
            }
            return choice == "sqlite" ? try openSQLite("sqlite chosen by \(source)") : try openSecretService("secret-service chosen by \(source)")
        }
        switch existing?.backend {
        case .sqlite?:
            return try openSQLite("auto: \(existing!.evidence)")
        case .secretService?:
            let probe = SecretServiceProbe.check(timeout: probeTimeout)
            guard probe.available else {
                throw VaultError(.unavailable, "\(existing!.evidence), but \(probe.reason); not starting an empty SQLite vault instead (start the Secret Service, or run with the session bus that has it)")
            }
            return try openSecretService("auto: \(existing!.evidence), and \(probe.reason)")
        case nil:
            let probe = SecretServiceProbe.check(timeout: probeTimeout)
            if probe.available { return try openSecretService("auto: \(probe.reason)") }
            return try openSQLite("auto: \(probe.reason), so the SQLite store is used")
        }
    }

    /// The SQLite store in `vault.db`, the vault key in `vault.key`.
    public func openSQLite(_ reason: String) throws(VaultError) -> OpenedStore {
        OpenedStore(store: try SQLiteStore(path: databasePath), keyFiles: keyFiles, reason: reason)
    }

    /// The Secret Service store under this folder's vault id (made and
    /// recorded in `store.json` the first time), the vault key in the collection.
    public func openSecretService(_ reason: String) throws(VaultError) -> OpenedStore {
        let marker = try StoreMarker.read(folder: dataFolder)
        let id = marker?.vaultID ?? StoreMarker.newVaultID()
        let store = try SecretServiceStore(vaultID: id, timeout: callTimeout)
        if marker?.backend != .secretService {
            try StoreMarker(backend: .secretService, vaultID: id).write(folder: dataFolder)
        }
        return OpenedStore(store: store, keyFiles: keyFiles.keepingVaultKey(in: SecretServiceVaultKey(store: store)), reason: reason)
    }
}

/// `vaultctl migrate`: moves the running vault to the other store (docs/stores.md).
///
/// Order, so that a failure or a crash at any point leaves a complete vault
/// in one place: (1) record the vault id (`store.json`, still naming the
/// source) so leftovers of an earlier attempt can be found and removed;
/// (2) copy and check (`Vault.migrate`); (3) the commit point: `store.json`
/// names the target, atomically; (4) remove the source. A crash before (3)
/// restarts on the complete source; after it, on the complete target, and
/// what is left of the source is removed by the next migration.
public struct StoreMigrator: Sendable {
    public let placement: StorePlacement
    /// Called after the switch with the new store (the daemon then follows its lock state).
    let onSwitch: @Sendable (any ItemStore) -> Void

    public init(placement: StorePlacement, onSwitch: @escaping @Sendable (any ItemStore) -> Void = { _ in }) {
        self.placement = placement
        self.onSwitch = onSwitch
    }

    /// What happened, for the `migrate` result.
    public struct Outcome: Sendable {
        public let from: String
        public let to: String
        public let report: Vault.MigrationReport
        public let seconds: Double
        /// Nil when the source was removed; else why it was not (the vault is fine).
        public let sourceNote: String?
    }

    public func migrate(_ vault: Vault, to target: StoreMarker.Backend) throws(VaultError) -> Outcome {
        let started = ContinuousClock.now
        let source = vault.store
        guard source.backendName != target.rawValue else { throw VaultError(.usage, "the vault is already in the \(target.rawValue) store") }
        let folder = placement.dataFolder
        let id = try StoreMarker.read(folder: folder)?.vaultID ?? StoreMarker.newVaultID()
        let report: Vault.MigrationReport
        var sourceNote: String?
        switch target {
        case .secretService:
            try StoreMarker(backend: .sqlite, vaultID: id).write(folder: folder)
            let ss = try SecretServiceStore(vaultID: id, timeout: placement.callTimeout)
            // The vault lives in SQLite: anything under this id is a leftover of an earlier attempt.
            try ss.destroy()
            report = try vault.migrate(to: ss, vaultKey: SecretServiceVaultKey(store: ss)) { () throws(VaultError) in
                try StoreMarker(backend: .secretService, vaultID: id).write(folder: folder)
            }
            do throws(VaultError) {
                try source.destroy()
                try VaultKeyFile(path: placement.keyFiles.vaultKeyPath).remove()
            } catch {
                sourceNote = "the old SQLite store could not be removed: \(error.message)"
            }
        case .sqlite:
            // The vault lives in the Secret Service: a vault.db here is a leftover.
            for path in [placement.databasePath, placement.databasePath + "-wal", placement.databasePath + "-shm"] {
                do { try FileSystem.remove(path) } catch { throw VaultError(.failure, "cannot remove the leftover \(path): \(error)") }
            }
            let sqlite = try SQLiteStore(path: placement.databasePath)
            report = try vault.migrate(to: sqlite, vaultKey: VaultKeyFile(path: placement.keyFiles.vaultKeyPath)) { () throws(VaultError) in
                try StoreMarker(backend: .sqlite, vaultID: id).write(folder: folder)
            }
            do throws(VaultError) { try source.destroy() } catch {
                sourceNote = "the old Secret Service items could not be removed: \(error.message)"
            }
        }
        onSwitch(vault.store)
        let d = ContinuousClock.now - started
        return Outcome(from: source.backendName, to: target.rawValue, report: report,
                       seconds: Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18, sourceNote: sourceNote)
    }
}
