internal import CSodium

/// Hash functions from libsodium.
public enum Digest {
    /// SHA-256 (`crypto_hash_sha256`), for PKCE's S256 (RFC 7636 section 4.2).
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        Sodium.ensureReady()
        var out = [UInt8](repeating: 0, count: 32)
        out.withUnsafeMutableBytes { o in
            bytes.withUnsafeBytes { i in
                _ = crypto_hash_sha256(o.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                       i.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? UnsafePointer(bitPattern: 1)!, UInt64(i.count))
            }
        }
        return out
    }

    /// Base64url without padding (RFC 4648 section 5), via `sodium_bin2base64`.
    public static func base64URL(_ bytes: [UInt8]) -> String {
        Sodium.ensureReady()
        let variant = Int32(sodium_base64_VARIANT_URLSAFE_NO_PADDING)
        let len = sodium_base64_encoded_len(bytes.count, variant)
        var out = [CChar](repeating: 0, count: len)
        bytes.withUnsafeBytes { i in
            _ = sodium_bin2base64(&out, len, i.baseAddress?.assumingMemoryBound(to: UInt8.self), i.count, variant)
        }
        return String(cString: out)
    }
}
