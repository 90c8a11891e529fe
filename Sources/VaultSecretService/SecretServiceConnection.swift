internal import CSecret
import VaultModel

/// One item found by a search: its object path, attributes, whether it is
/// locked, and its secret when it was unlocked.
struct FoundItem: Sendable {
    let path: String
    let attributes: [String: String]
    let locked: Bool
    let secret: [UInt8]?
}

/// The Secret Service through libsecret, as TokenVault uses it: a session
/// (`secret_service_get_sync` with `SECRET_SERVICE_OPEN_SESSION`), searches
/// that never unlock (`secret_service_search_sync` without
/// `SECRET_SEARCH_UNLOCK`), and the two calls that could answer with a
/// prompt (`CreateItem`, `Item.Delete`) made directly over the service's
/// D-Bus connection so that a prompt is reported as `locked` and never
/// performed (libsecret would perform it and wait for the user).
///
/// Thread safety: used only on its store's `BlockingWorker` queue, one call
/// at a time; the pointers never change after `init`. Hence
/// `@unchecked Sendable`, so the worker's closures can carry it.
final class SecretServiceConnection: @unchecked Sendable {
    private let service: UnsafeMutablePointer<SecretService>
    private let bus: OpaquePointer
    /// Timeout of each D-Bus call made directly.
    let callTimeoutMs: Int32

    /// Connects and opens a transfer session. Calls `secret_service_get_sync`.
    init(callTimeoutMs: Int32) throws(VaultError) {
        var error: UnsafeMutablePointer<GError>?
        guard let service = secret_service_get_sync(SECRET_SERVICE_OPEN_SESSION, nil, &error) else {
            throw VaultError(.unavailable, "cannot reach the Secret Service: \(Self.message(error))")
        }
        self.service = service
        bus = tv_proxy_connection(UnsafeMutableRawPointer(service))
        self.callTimeoutMs = callTimeoutMs
    }

    deinit { tv_object_unref(UnsafeMutableRawPointer(service)) }

    static func message(_ error: UnsafeMutablePointer<GError>?) -> String {
        guard let error else { return "no answer (the service may have refused or is gone)" }
        defer { g_error_free(error) }
        return error.pointee.message.map { String(cString: $0) } ?? "unknown error"
    }

    /// The object path of the collection behind `alias` ("default"), or nil
    /// when there is none. `Service.ReadAlias`.
    func collection(alias: String) throws(VaultError) -> String? {
        var error: UnsafeMutablePointer<GError>?
        var out: UnsafeMutablePointer<gchar>?
        guard tv_call_simple(bus, "org.freedesktop.secrets", "/org/freedesktop/secrets", "org.freedesktop.Secret.Service", "ReadAlias",
                             CChar(UInt8(ascii: "s")), alias, 0, CChar(UInt8(ascii: "o")), 0, callTimeoutMs, &out, nil, &error) != 0, let out else {
            throw VaultError(.unavailable, "the Secret Service did not resolve the \(alias) collection: \(Self.message(error))")
        }
        defer { g_free(out) }
        let path = String(cString: out)
        return path == "/" ? nil : path
    }

    /// The collection's `Locked` property, read fresh from the service.
    func isLocked(collection: String) throws(VaultError) -> Bool {
        var error: UnsafeMutablePointer<GError>?
        var out: gboolean = 0
        guard tv_get_bool_property(bus, "org.freedesktop.secrets", collection, "org.freedesktop.Secret.Collection", "Locked",
                                   callTimeoutMs, &out, &error) != 0 else {
            throw VaultError(.unavailable, "cannot read whether collection \(collection) is locked: \(Self.message(error))")
        }
        return out != 0
    }

    /// Items of the schema matching `attributes`, in every collection, with
    /// the secrets of the unlocked ones when `loadSecrets`. Never unlocks.
    func search(_ attributes: [String: String], loadSecrets: Bool) throws(VaultError) -> [FoundItem] {
        let table = tv_attributes_new()
        defer { g_hash_table_unref(table) }
        for (k, v) in attributes { tv_attributes_set(table, k, v) }
        var flags = SECRET_SEARCH_ALL.rawValue
        if loadSecrets { flags |= SECRET_SEARCH_LOAD_SECRETS.rawValue }
        var error: UnsafeMutablePointer<GError>?
        let list = secret_service_search_sync(service, tv_item_schema(), table, SecretSearchFlags(rawValue: flags), nil, &error)
        if let error {
            let text = Self.message(error)
            throw VaultError(.unavailable, "searching the Secret Service failed: \(text)")
        }
        defer { if let list { tv_item_list_free(list) } }
        var found: [FoundItem] = []
        var node = list
        while let n = node {
            if let data = n.pointee.data {
                found.append(read(data.assumingMemoryBound(to: SecretItem.self)))
            }
            node = n.pointee.next
        }
        return found
    }

    private func read(_ item: UnsafeMutablePointer<SecretItem>) -> FoundItem {
        let path = String(cString: tv_proxy_path(UnsafeMutableRawPointer(item)))
        var attributes: [String: String] = [:]
        if let table = secret_item_get_attributes(item) {
            var iter = GHashTableIter()
            g_hash_table_iter_init(&iter, table)
            var k: gpointer?
            var v: gpointer?
            while g_hash_table_iter_next(&iter, &k, &v) != 0 {
                if let k, let v {
                    attributes[String(cString: k.assumingMemoryBound(to: CChar.self))] = String(cString: v.assumingMemoryBound(to: CChar.self))
                }
            }
            g_hash_table_unref(table)
        }
        let locked = secret_item_get_locked(item) != 0
        var secret: [UInt8]?
        if !locked, let value = secret_item_get_secret(item) {
            var length: gsize = 0
            if let bytes = secret_value_get(value, &length) {
                secret = Array(UnsafeRawBufferPointer(start: bytes, count: Int(length)))
            }
            secret_value_unref(UnsafeMutableRawPointer(value))
        }
        return FoundItem(path: path, attributes: attributes, locked: locked, secret: secret)
    }

    /// Creates an item (never replacing one) and returns its path.
    /// Throws `locked` when the service answers with a prompt, which is not performed.
    func create(in collection: String, label: String, attributes: [String: String], secret: [UInt8]) throws(VaultError) -> String {
        let table = tv_attributes_new()
        defer { g_hash_table_unref(table) }
        for (k, v) in attributes { tv_attributes_set(table, k, v) }
        let value = secret.withUnsafeBufferPointer { p in
            secret_value_new(UnsafeRawPointer(p.baseAddress ?? UnsafePointer(bitPattern: 1)!).assumingMemoryBound(to: CChar.self), gssize(p.count), "application/octet-stream")
        }
        defer { secret_value_unref(UnsafeMutableRawPointer(value)) }
        guard let encoded = secret_service_encode_dbus_secret(service, value) else {
            throw VaultError(.failure, "libsecret could not encode a secret for the Secret Service session")
        }
        var error: UnsafeMutablePointer<GError>?
        var itemPath: UnsafeMutablePointer<gchar>?
        var promptPath: UnsafeMutablePointer<gchar>?
        guard tv_create_item(bus, collection, label, table, encoded, callTimeoutMs, &itemPath, &promptPath, &error) != 0 else {
            throw VaultError(.unavailable, "the Secret Service did not create an item in \(collection): \(Self.message(error))")
        }
        defer { g_free(itemPath); g_free(promptPath) }
        let prompt = promptPath.map { String(cString: $0) } ?? "/"
        guard prompt == "/", let itemPath else {
            throw VaultError(.locked, "collection \(collection) is locked (the Secret Service asked for a prompt, which TokenVault never shows); nothing was written")
        }
        return String(cString: itemPath)
    }

    /// Deletes the item at `path`. Throws `locked` when the service answers with a prompt.
    func delete(_ path: String) throws(VaultError) {
        var error: UnsafeMutablePointer<GError>?
        var promptPath: UnsafeMutablePointer<gchar>?
        guard tv_delete_item(bus, path, callTimeoutMs, &promptPath, &error) != 0 else {
            throw VaultError(.unavailable, "the Secret Service did not delete item \(path): \(Self.message(error))")
        }
        defer { g_free(promptPath) }
        if let promptPath, String(cString: promptPath) != "/" {
            throw VaultError(.locked, "item \(path) is in a locked collection (the Secret Service asked for a prompt, which TokenVault never shows); it was not deleted")
        }
    }
}
