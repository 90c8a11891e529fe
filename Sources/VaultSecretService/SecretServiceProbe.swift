import Synchronization
import VaultDBus
import VaultModel

/// Whether a Secret Service answers on the session bus, for `auto` store
/// selection: one `ReadAlias("default")` call with a deadline, on a private
/// connection. Auto-start is allowed, as any libsecret client would.
public enum SecretServiceProbe {
    /// The outcome, with the reason `vaultctl status` shows.
    public struct Outcome: Sendable {
        public let available: Bool
        public let reason: String
        /// How long the probe took, in milliseconds.
        public let milliseconds: Int
    }

    public static func check(timeout: Duration = .milliseconds(500)) -> Outcome {
        let start = ContinuousClock.now
        func ms() -> Int {
            let d = ContinuousClock.now - start
            return Int(d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000)
        }
        let timeoutMs = Int32(clamping: timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        do throws(VaultError) {
            let bus = try DBusConnection.connect(.session, timeout: timeout)
            let path = try bus.callReturningPath("org.freedesktop.secrets", "/org/freedesktop/secrets", "org.freedesktop.Secret.Service", "ReadAlias",
                                                 string: "default", autoStart: true, timeoutMs: max(1, timeoutMs - Int32(ms())))
            guard path != "/" else {
                return Outcome(available: false, reason: "a Secret Service answers on the session bus but has no default collection", milliseconds: ms())
            }
            return Outcome(available: true, reason: "a Secret Service answered on the session bus in \(ms()) ms (default collection \(path))", milliseconds: ms())
        } catch {
            return Outcome(available: false, reason: "no Secret Service answered on the session bus within \(timeoutMs) ms: \(error.message)", milliseconds: ms())
        }
    }
}

/// Follows the lock state of the Secret Service collection that holds the
/// vault: `org.freedesktop.Secret.Service.CollectionChanged` (gnome-keyring
/// sends it on lock and unlock) and the collection's `PropertiesChanged`,
/// each followed by a fresh read of its `Locked` property. The handler runs
/// on the loop's thread and only when the state changes.
public final class CollectionLockWatcher: Sendable {
    let bus: DBusConnection
    let collection: String
    let last = LastState()

    /// The last lock state seen, shared with the signal handlers.
    final class LastState: Sendable { let value = Mutex<Bool?>(nil) }

    /// Subscribes on a private session-bus connection.
    public init(collection: String, loop: GLibLoop, timeout: Duration = .seconds(2), _ handler: @escaping @Sendable (Bool) -> Void) throws(VaultError) {
        self.collection = collection
        bus = try DBusConnection.connect(.session, timeout: timeout)
        let initial = try bus.boolProperty("org.freedesktop.secrets", collection, "org.freedesktop.Secret.Collection", "Locked", timeoutMs: 2000)
        last.value.withLock { $0 = initial }
        let check: @Sendable (String, SignalValue) -> Void = { [bus, last] _, _ in
            guard let locked = try? bus.boolProperty("org.freedesktop.secrets", collection, "org.freedesktop.Secret.Collection", "Locked", timeoutMs: 2000) else { return }
            let changed = last.value.withLock { previous -> Bool in
                defer { previous = locked }
                return previous != locked
            }
            if changed { handler(locked) }
        }
        bus.subscribe(on: loop, sender: "org.freedesktop.secrets", interface: "org.freedesktop.Secret.Service", member: "CollectionChanged",
                      path: "/org/freedesktop/secrets", extract: .nothing, check)
        bus.subscribe(on: loop, sender: "org.freedesktop.secrets", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                      path: collection, extract: .nothing, check)
    }

    /// The lock state last seen.
    public var isLocked: Bool? { last.value.withLock { $0 } }
}
