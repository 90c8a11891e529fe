import VaultModel

/// The associated data bound into each seal, so a record moved, swapped or
/// relabelled fails to open. Fields are length-prefixed (4 bytes, big
/// endian) so no two different field lists encode the same bytes.
enum AssociatedData {
    static func encode(_ label: String, _ fields: [String]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(label.utf8.count + fields.reduce(0) { $0 + 4 + $1.utf8.count })
        out.append(contentsOf: label.utf8)
        for f in fields {
            let n = UInt32(f.utf8.count)
            out.append(UInt8(n >> 24))
            out.append(UInt8(n >> 16 & 0xFF))
            out.append(UInt8(n >> 8 & 0xFF))
            out.append(UInt8(n & 0xFF))
            out.append(contentsOf: f.utf8)
        }
        return out
    }

    /// An item's identity: provider, account, kind, mode.
    static func item(_ key: ItemKey, mode: AccessMode) -> [UInt8] {
        encode("tokenvault/item/v1", [key.provider, key.account, key.kind.rawValue, mode.rawValue])
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
