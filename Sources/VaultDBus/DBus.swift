internal import CSecret
import Dispatch
import VaultModel
import VaultSystem

/// Which message bus.
public enum DBusBusKind: Sendable {
    case system, session

    var name: String { self == .system ? "system bus" : "session bus" }
}

/// A GLib main loop on its own thread with its own `GMainContext`: D-Bus
/// signal callbacks run there, never on Swift's cooperative pool.
///
/// Thread safety: `perform` may be called from any thread; the context and
/// loop pointers never change after `init`, and GLib's context functions
/// are thread-safe. Hence `@unchecked Sendable`.
public final class GLibLoop: @unchecked Sendable {
    let context: OpaquePointer
    let loop: OpaquePointer

    /// Calls `g_main_context_new` and `g_main_loop_new`.
    public init() {
        context = g_main_context_new()
        loop = g_main_loop_new(context, 0)
    }

    deinit {
        g_main_loop_unref(loop)
        g_main_context_unref(context)
    }

    /// Starts the loop thread (`g_main_loop_run` with the context pushed as the thread default).
    public func start() throws(VaultError) {
        let context = UncheckedPointer(raw: self.context), loop = UncheckedPointer(raw: self.loop)
        do {
            try spawnThread(stackSize: 512 * 1024) {
                g_main_context_push_thread_default(context.raw)
                g_main_loop_run(loop.raw)
                g_main_context_pop_thread_default(context.raw)
            }
        } catch {
            throw VaultError(.failure, "cannot start the GLib main loop thread: \(error)")
        }
    }

    /// Stops the loop (`g_main_loop_quit`).
    public func stop() { g_main_loop_quit(loop) }

    /// Runs `body` on the loop's thread (or here, with the context as the
    /// thread default, while the loop is not running) and waits for it.
    /// Calls `g_main_context_invoke_full`.
    public func perform(_ body: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        let box = Unmanaged.passRetained(InvokeBox { body(); done.signal() }).toOpaque()
        g_main_context_invoke_full(context, 0, glibInvokeTrampoline, box, glibInvokeRelease)
        done.wait()
    }
}

/// The closure handed through `g_main_context_invoke_full`.
final class InvokeBox {
    let body: () -> Void
    init(_ body: @escaping () -> Void) { self.body = body }
}

/// `GSourceFunc` for `GLibLoop.perform`: runs once (`G_SOURCE_REMOVE`).
let glibInvokeTrampoline: @convention(c) (gpointer?) -> gboolean = { data in
    Unmanaged<InvokeBox>.fromOpaque(data!).takeUnretainedValue().body()
    return 0
}

/// `GDestroyNotify` for `GLibLoop.perform`.
let glibInvokeRelease: @convention(c) (gpointer?) -> Void = { data in
    Unmanaged<InvokeBox>.fromOpaque(data!).release()
}

/// What a signal subscriber wants from the signal's parameters.
public enum SignalExtraction: Sendable {
    /// The signal's only argument, a boolean (login1 `PrepareForSleep`).
    case booleanArgument
    /// A boolean property in `PropertiesChanged` (login1 `LockedHint`).
    case changedBooleanProperty(interface: String, name: String)
    /// Nothing: the signal itself is the news.
    case nothing
}

/// What was found in a signal.
public enum SignalValue: Sendable, Equatable {
    case bool(Bool)
    /// The property was invalidated: read it again.
    case invalidated
    /// Not mentioned (another property changed) or no value asked for.
    case absent
}

/// One signal subscription's handler.
final class SubscriptionBox {
    let extraction: SignalExtraction
    let handler: @Sendable (String, SignalValue) -> Void
    init(_ extraction: SignalExtraction, _ handler: @escaping @Sendable (String, SignalValue) -> Void) {
        self.extraction = extraction
        self.handler = handler
    }
}

/// `GDBusSignalCallback`: reads the value the subscriber asked for and calls it.
/// A nonisolated global (not in main.swift): it runs on the GLib loop thread.
let dbusSignalTrampoline: @convention(c) (OpaquePointer?, UnsafePointer<gchar>?, UnsafePointer<gchar>?, UnsafePointer<gchar>?,
                                          UnsafePointer<gchar>?, OpaquePointer?, gpointer?) -> Void = { _, _, path, _, _, params, data in
    let box = Unmanaged<SubscriptionBox>.fromOpaque(data!).takeUnretainedValue()
    let value: SignalValue
    let code: Int32
    switch box.extraction {
    case .nothing: code = -1
    case .booleanArgument: code = tv_signal_bool(params)
    case .changedBooleanProperty(let interface, let name): code = tv_properties_changed_bool(params, interface, name)
    }
    switch code {
    case 0: value = .bool(false)
    case 1: value = .bool(true)
    case 2: value = .invalidated
    default: value = .absent
    }
    box.handler(path.map { String(cString: $0) } ?? "", value)
}

/// `GDestroyNotify` for a subscription's box.
let dbusSubscriptionRelease: @convention(c) (gpointer?) -> Void = { data in
    Unmanaged<SubscriptionBox>.fromOpaque(data!).release()
}

/// A private connection to a message bus (`GDBusConnection`).
///
/// Every call has a timeout (GDBus enforces it) and never auto-starts a
/// service unless asked. Thread safety: GDBus connections may be used from
/// any thread, and the pointer never changes, hence `@unchecked Sendable`.
public final class DBusConnection: @unchecked Sendable {
    let raw: OpaquePointer
    public let bus: DBusBusKind
    /// The bus address, for messages.
    public let address: String

    /// Connects to `bus` at its usual address (`$DBUS_SYSTEM_BUS_ADDRESS` or
    /// `/run/dbus/system_bus_socket`; `$DBUS_SESSION_BUS_ADDRESS` or
    /// `$XDG_RUNTIME_DIR/bus`). Calls `g_dbus_address_get_for_bus_sync` and
    /// `g_dbus_connection_new_for_address_sync`, on a worker with a deadline.
    public static func connect(_ bus: DBusBusKind, timeout: Duration) throws(VaultError) -> DBusConnection {
        let worker = BlockingWorker(label: "tokenvault.dbus-connect", serviceName: "the \(bus.name)")
        return try worker.run("connecting", timeout: timeout) { () throws(VaultError) -> DBusConnection in
            var error: UnsafeMutablePointer<GError>?
            guard let addressC = g_dbus_address_get_for_bus_sync(bus == .system ? G_BUS_TYPE_SYSTEM : G_BUS_TYPE_SESSION, nil, &error) else {
                throw VaultError(.unavailable, "no \(bus.name): \(takeMessage(error))")
            }
            let address = String(cString: addressC)
            g_free(addressC)
            let flags = GDBusConnectionFlags(rawValue: G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT.rawValue | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION.rawValue)
            guard let conn = g_dbus_connection_new_for_address_sync(address, flags, nil, nil, &error) else {
                throw VaultError(.unavailable, "cannot connect to the \(bus.name) at \(address): \(takeMessage(error))")
            }
            // A vanished bus must not end the process (the GDBus default for the shared buses).
            g_dbus_connection_set_exit_on_close(conn, 0)
            return DBusConnection(raw: conn, bus: bus, address: address)
        }
    }

    init(raw: OpaquePointer, bus: DBusBusKind, address: String) {
        self.raw = raw
        self.bus = bus
        self.address = address
    }

    deinit {
        g_dbus_connection_close_sync(raw, nil, nil)
        tv_object_unref(UnsafeMutableRawPointer(raw))
    }

    /// Calls a method taking nothing, a string or a uint32 and returning an
    /// object path. Calls `g_dbus_connection_call_sync`.
    public func callReturningPath(_ destination: String, _ path: String, _ interface: String, _ method: String,
                                  string: String? = nil, uint32: UInt32? = nil, autoStart: Bool = false, timeoutMs: Int32) throws(VaultError) -> String {
        var error: UnsafeMutablePointer<GError>?
        var out: UnsafeMutablePointer<gchar>?
        let kind: CChar = string != nil ? CChar(UInt8(ascii: "s")) : uint32 != nil ? CChar(UInt8(ascii: "u")) : 0
        guard tv_call_simple(raw, destination, path, interface, method, kind, string, uint32 ?? 0, CChar(UInt8(ascii: "o")), autoStart ? 1 : 0, timeoutMs, &out, nil, &error) != 0,
              let out else {
            throw VaultError(.unavailable, "\(interface).\(method) on the \(bus.name) failed: \(takeMessage(error))")
        }
        defer { g_free(out) }
        return String(cString: out)
    }

    /// Calls a method taking a string and returning a boolean.
    public func callReturningBool(_ destination: String, _ path: String, _ interface: String, _ method: String,
                                  string: String, timeoutMs: Int32) throws(VaultError) -> Bool {
        var error: UnsafeMutablePointer<GError>?
        var out: gboolean = 0
        guard tv_call_simple(raw, destination, path, interface, method, CChar(UInt8(ascii: "s")), string, 0, CChar(UInt8(ascii: "b")), 0, timeoutMs, nil, &out, &error) != 0 else {
            throw VaultError(.unavailable, "\(interface).\(method) on the \(bus.name) failed: \(takeMessage(error))")
        }
        return out != 0
    }

    /// Reads a boolean property (`org.freedesktop.DBus.Properties.Get`).
    public func boolProperty(_ destination: String, _ path: String, _ interface: String, _ name: String, timeoutMs: Int32) throws(VaultError) -> Bool {
        var error: UnsafeMutablePointer<GError>?
        var out: gboolean = 0
        guard tv_get_bool_property(raw, destination, path, interface, name, timeoutMs, &out, &error) != 0 else {
            throw VaultError(.unavailable, "reading \(interface).\(name) of \(path) on the \(bus.name) failed: \(takeMessage(error))")
        }
        return out != 0
    }

    /// Reads the object path of a `(so)` property, such as login1 `User.Display`.
    public func structPathProperty(_ destination: String, _ path: String, _ interface: String, _ name: String, timeoutMs: Int32) throws(VaultError) -> String {
        var error: UnsafeMutablePointer<GError>?
        var out: UnsafeMutablePointer<gchar>?
        guard tv_get_struct_path_property(raw, destination, path, interface, name, timeoutMs, &out, &error) != 0, let out else {
            throw VaultError(.unavailable, "reading \(interface).\(name) of \(path) on the \(bus.name) failed: \(takeMessage(error))")
        }
        defer { g_free(out) }
        return String(cString: out)
    }

    /// Subscribes to a signal; `handler` runs on `loop`'s thread with the
    /// signal's object path and the value asked for.
    /// Calls `g_dbus_connection_signal_subscribe` on the loop's thread.
    public func subscribe(on loop: GLibLoop, sender: String?, interface: String, member: String, path: String?,
                          extract: SignalExtraction, _ handler: @escaping @Sendable (String, SignalValue) -> Void) {
        let raw = UncheckedPointer(raw: self.raw)
        loop.perform {
            let box = Unmanaged.passRetained(SubscriptionBox(extract, handler)).toOpaque()
            _ = g_dbus_connection_signal_subscribe(raw.raw, sender, interface, member, path, nil, G_DBUS_SIGNAL_FLAGS_NONE,
                                                   dbusSignalTrampoline, box, dbusSubscriptionRelease)
        }
    }
}

/// A C pointer carried into a `@Sendable` closure. Safe here because GDBus
/// connections are thread-safe and the owner outlives the closure's run
/// (`GLibLoop.perform` waits for it).
struct UncheckedPointer: @unchecked Sendable {
    let raw: OpaquePointer
}

/// The message of a `GError`, which is then freed.
func takeMessage(_ error: UnsafeMutablePointer<GError>?) -> String {
    guard let error else { return "unknown error" }
    defer { g_error_free(error) }
    return error.pointee.message.map { String(cString: $0) } ?? "unknown error"
}
