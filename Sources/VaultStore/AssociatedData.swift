import VaultModel

/// The associated data bound into each seal, so a record moved, swapped or
/// relabelled fails to open. Fields are length-prefixed (4 bytes, big
/// endian) so no two different field lists encode the same bytes.
enum AssociatedData {
    static func encode(_ label: String, _ fields: [String]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(label.utf8.count + fields.reduce(0) { $0 + 4 + $1.utf8.count })
        out.append(contentsOf: label.utf8)
        for f in fields { append(f, to: &out) }
        return out
    }

    /// Appends one field: its length (4 bytes, big endian), then its bytes.
    private static func append(_ field: String, to out: inout [UInt8]) {
        let n = UInt32(field.utf8.count)
        out.append(UInt8(n >> 24))
        out.append(UInt8(n >> 16 & 0xFF))
        out.append(UInt8(n >> 8 & 0xFF))
        out.append(UInt8(n & 0xFF))
        out.append(contentsOf: field.utf8)
    }

    /// An item's identity: provider, account, kind, mode. The same bytes as
    /// `encode` of the four fields, without the array (every request opens an item).
    static func item(_ key: ItemKey, mode: AccessMode) -> [UInt8] {
        let label = "tokenvault/item/v1"
        var out: [UInt8] = []
        out.reserveCapacity(label.utf8.count + 16 + key.provider.utf8.count + key.account.utf8.count + key.kind.rawValue.utf8.count + mode.rawValue.utf8.count)
        out.append(contentsOf: label.utf8)
        append(key.provider, to: &out)
        append(key.account, to: &out)
        append(key.kind.rawValue, to: &out)
        append(mode.rawValue, to: &out)
        return out
    }

    /// A class key's outer wrapping (under the vault key or the device key).
    static func classKey(_ mode: AccessMode) -> [UInt8] {
        encode("tokenvault/class-key/v1", [mode.rawValue])
    }

    /// The inner wrapping of a `*-this-device-only` class key, bound to the machine.
    static func deviceBound(_ mode: AccessMode, machineID: String) -> [UInt8] {
        encode("tokenvault/device-bound/v1", [mode.rawValue, machineID])
    }
}
