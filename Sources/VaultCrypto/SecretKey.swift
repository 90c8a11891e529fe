internal import CSodium

/// A 256-bit symmetric key in guarded memory; its description is redacted.
public struct SecretKey: Sendable, CustomStringConvertible {
    /// Key length in bytes (`crypto_aead_xchacha20poly1305_ietf_KEYBYTES`).
    public static let byteCount = 32

    let bytes: SecureBytes

    /// Wraps guarded bytes that hold a key of `byteCount` bytes.
    public init(_ bytes: SecureBytes) throws {
        guard bytes.count == SecretKey.byteCount else {
            throw CryptoError(.malformed, "a key must be \(SecretKey.byteCount) bytes, got \(bytes.count)")
        }
        self.bytes = bytes
    }

    /// A new random key (`randombytes_buf` into `sodium_malloc` memory).
    public static func random() throws -> SecretKey {
        try SecretKey(SecureBytes.random(count: byteCount))
    }

    /// Borrowed access to the raw key.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try bytes.withUnsafeBytes(body)
    }

    /// Whether two keys are equal, compared in constant time.
    public func constantTimeEquals(_ other: SecretKey) -> Bool { bytes.constantTimeEquals(other.bytes) }

    public var description: String { "SecretKey(redacted)" }
}
