/// Rules for provider and account names.
///
/// Names appear in file-free places only (SQL parameters, Secret Service
/// attributes, log lines), but keeping them printable keeps logs and
/// terminal output honest: letters, digits and `._-@+:`, 1 to 128 bytes.
public enum ItemName {
    /// The account used when none is given.
    public static let defaultAccount = "default"

    /// Throws a `badInput` error naming `what` if `name` is not acceptable.
    public static func validate(_ name: String, what: String) throws(VaultError) {
        let bytes = name.utf8
        guard !bytes.isEmpty, bytes.count <= 128 else {
            throw VaultError(.badInput, "\(what) name must be 1 to 128 characters")
        }
        for b in bytes {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "@"), UInt8(ascii: "+"), UInt8(ascii: ":"):
                continue
            default:
                throw VaultError(.badInput, "\(what) name \"\(printable(name))\" may hold only letters, digits and ._-@+:")
            }
        }
    }

    /// `s` with anything outside printable ASCII replaced, at most 64 characters.
    public static func printable(_ s: String) -> String {
        var out = ""
        for u in s.unicodeScalars.prefix(64) {
            out.unicodeScalars.append((0x20..<0x7F).contains(u.value) ? u : "?")
        }
        return out
    }
}
