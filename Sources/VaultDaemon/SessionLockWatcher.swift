@preconcurrency import Glibc
import Synchronization
import VaultDBus
import VaultModel
import VaultSecretService
import VaultStore
import VaultSystem

/// Locks the vault when the user's session locks, and unlocks it again.
///
/// Follows logind on the system bus: the user's session's `LockedHint`
/// (`org.freedesktop.login1.Session`, via `PropertiesChanged`; on a desktop
/// `Lock`/`Unlock` are requests to the screen locker, `LockedHint` is the
/// state) and `org.freedesktop.login1.Manager.PrepareForSleep`. The session
/// is `$XDG_SESSION_ID`, else the one of this process
/// (`GetSessionByPID`), else the user's display session (`User.Display`).
///
/// A locked session locks the vault after `grace` (a session unlocked
/// within the grace period changes nothing); going to sleep locks at once.
/// An unlocked session unlocks the vault again when the watcher locked it
/// and the vault key is at hand without a passphrase; otherwise the vault
/// waits for `vaultctl unlock`. Signals arrive on the GLib loop's thread;
/// the grace timer is a thread of its own that re-checks on wake-up.
final class SessionLockWatcher: Sendable {
    private struct State {
        var sessionLocked = false
        /// Bumped at every change, so a stale grace timer does nothing.
        var generation = 0
        /// The watcher locked the vault (so it may unlock it again).
        var lockedByWatcher = false
    }

    let vault: Vault
    let grace: Duration
    let logger: Logger
    private let state = Mutex(State())
    private let statusText = Mutex("off: not started")

    init(vault: Vault, grace: Duration, logger: Logger) {
        self.vault = vault
        self.grace = grace
        self.logger = logger
    }

    /// What `vaultctl status` shows.
    var status: String { statusText.withLock { $0 } }

    static let login1 = "org.freedesktop.login1"
    static let managerPath = "/org/freedesktop/login1"
    static let managerInterface = "org.freedesktop.login1.Manager"
    static let sessionInterface = "org.freedesktop.login1.Session"

    /// Connects and subscribes; on any failure the watcher stays off and says why.
    func start(loop: GLibLoop) {
        let bus: DBusConnection
        do { bus = try DBusConnection.connect(.system, timeout: .seconds(1)) } catch {
            set("off: no system bus (\(error.message))")
            return
        }
        let session: String
        do { session = try findSession(bus) } catch {
            set("off: no logind session found for this user (\(error.message))")
            return
        }
        let locked = (try? bus.boolProperty(Self.login1, session, Self.sessionInterface, "LockedHint", timeoutMs: 2000)) ?? false
        bus.subscribe(on: loop, sender: Self.login1, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged", path: session,
                      extract: .changedBooleanProperty(interface: Self.sessionInterface, name: "LockedHint")) { [self] _, value in
            switch value {
            case .bool(let b): sessionChanged(locked: b)
            case .invalidated:
                if let b = try? bus.boolProperty(Self.login1, session, Self.sessionInterface, "LockedHint", timeoutMs: 2000) { sessionChanged(locked: b) }
            case .absent: break
            }
        }
        bus.subscribe(on: loop, sender: Self.login1, interface: Self.managerInterface, member: "PrepareForSleep", path: Self.managerPath,
                      extract: .booleanArgument) { [self] _, value in
            guard case .bool(let sleeping) = value else { return }
            if sleeping {
                lockNow("the machine is going to sleep")
            } else if let b = try? bus.boolProperty(Self.login1, session, Self.sessionInterface, "LockedHint", timeoutMs: 2000) {
                sessionChanged(locked: b)
            }
        }
        let graceText = Self.seconds(grace)
        set("on: logind session \(session), locks \(graceText) after the session locks")
        logger.info("session-lock watcher on: \(session), grace \(graceText)")
        if locked { sessionChanged(locked: true) }
        // Keep the connection alive as long as the subscriptions.
        keepAlive.withLock { $0 = bus }
    }

    private let keepAlive = Mutex<DBusConnection?>(nil)

    private func set(_ text: String) {
        statusText.withLock { $0 = text }
        if text.hasPrefix("off") { logger.info("session-lock watcher \(text)") }
    }

    static func seconds(_ d: Duration) -> String {
        let ms = d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
        return ms % 1000 == 0 ? "\(ms / 1000) s" : "\(Double(ms) / 1000) s"
    }

    /// The session to follow (see the type's comment).
    func findSession(_ bus: DBusConnection) throws(VaultError) -> String {
        if let id = Environment.get("XDG_SESSION_ID") {
            return try bus.callReturningPath(Self.login1, Self.managerPath, Self.managerInterface, "GetSession", string: id, timeoutMs: 2000)
        }
        if let path = try? bus.callReturningPath(Self.login1, Self.managerPath, Self.managerInterface, "GetSessionByPID", uint32: UInt32(getpid()), timeoutMs: 2000) {
            return path
        }
        let user = try bus.callReturningPath(Self.login1, Self.managerPath, Self.managerInterface, "GetUser", uint32: UInt32(getuid()), timeoutMs: 2000)
        let display = try bus.structPathProperty(Self.login1, user, "org.freedesktop.login1.User", "Display", timeoutMs: 2000)
        guard display != "/" else { throw VaultError(.notFound, "the user has no display session") }
        return display
    }

    /// A change of the session's lock state.
    func sessionChanged(locked: Bool) {
        let generation = state.withLock { s -> Int in
            s.sessionLocked = locked
            s.generation += 1
            return s.generation
        }
        if locked {
            logger.info("the session is locked; the vault locks in \(Self.seconds(grace)) unless it is unlocked first")
            let deadline = ContinuousClock.now + grace
            do {
                try spawnThread { [self] in
                    // Sleep in short steps, re-reading the clock: it counts suspended time.
                    while ContinuousClock.now < deadline {
                        if state.withLock({ $0.generation != generation }) { return }
                        usleep(20_000)
                    }
                    if state.withLock({ $0.generation == generation && $0.sessionLocked }) { lockNow("the session has been locked for \(Self.seconds(grace))") }
                }
            } catch {
                lockNow("the session is locked (no timer thread: \(error))")
            }
        } else {
            let ours = state.withLock { s -> Bool in
                defer { s.lockedByWatcher = false }
                return s.lockedByWatcher
            }
            guard ours, vault.lockState == .locked else { return }
            if vault.status.hasPassphrase {
                logger.info("the session is unlocked; the vault has a passphrase and waits for `vaultctl unlock`")
                return
            }
            do {
                try vault.unlock(passphrase: nil)
                logger.info("the session is unlocked; vault unlocked")
            } catch {
                logger.warning("the session is unlocked but the vault stays locked: \(error.message)")
            }
        }
    }

    private func lockNow(_ why: String) {
        guard vault.lockState == .unlocked else { return }
        vault.lock()
        state.withLock { $0.lockedByWatcher = true }
        logger.info("vault locked: \(why)")
    }
}

/// The daemon's lock watchers on one GLib loop: the session-lock watcher
/// (system bus) and, while the vault lives in the Secret Service, the lock
/// state of its collection (session bus): a locked collection locks the
/// vault, an unlocked one opens it again (loading it if it waited for the
/// store at start, unlocking it when it has no passphrase).
final class LockWatchers: Sendable {
    let loop = GLibLoop()
    let session: SessionLockWatcher
    let vault: Vault
    let logger: Logger
    private let collection = Mutex<CollectionLockWatcher?>(nil)

    init(vault: Vault, grace: Duration, logger: Logger) {
        self.vault = vault
        self.logger = logger
        session = SessionLockWatcher(vault: vault, grace: grace, logger: logger)
    }

    func start(enableSessionWatcher: Bool) throws(VaultError) {
        try loop.start()
        if enableSessionWatcher { session.start(loop: loop) }
        follow(vault.store)
    }

    /// Follows the lock state of `store`'s collection when it is a Secret Service store.
    func follow(_ store: any ItemStore) {
        guard let ss = store as? SecretServiceStore else { return }
        guard collection.withLock({ $0 == nil }) else { return }
        do {
            let watcher = try CollectionLockWatcher(collection: ss.collectionPath, loop: loop) { [vault, logger] locked in
                guard vault.store.backendName == "secret-service" else { return }
                if locked {
                    vault.lock()
                    logger.info("the Secret Service collection was locked; vault locked")
                } else {
                    // Off the loop thread: loading and unlocking call the Secret Service.
                    try? spawnThread {
                        do {
                            try vault.reloadIfWaiting()
                            if !vault.status.hasPassphrase && vault.lockState != .unlocked { try vault.unlock(passphrase: nil) }
                            logger.info("the Secret Service collection was unlocked; vault \(vault.lockState.rawValue)")
                        } catch {
                            logger.warning("the Secret Service collection was unlocked but the vault could not open: \(error)")
                        }
                    }
                }
            }
            collection.withLock { $0 = watcher }
        } catch {
            logger.warning("cannot follow the lock state of \(ss.collectionPath): \(error)")
        }
    }
}
