internal import CSodium

/// XChaCha20-Poly1305 (IETF) authenticated encryption with associated data,
/// from libsodium (`crypto_aead_xchacha20poly1305_ietf_*`).
///
/// A sealed box is `version (1) || nonce (24) || ciphertext || tag (16)`;
/// the nonce is random for every seal, which the 192-bit nonce makes safe.
public enum AEAD {
    /// The format byte at the front of every sealed box.
    public static let version: UInt8 = 1
    /// Nonce length (`crypto_aead_xchacha20poly1305_ietf_NPUBBYTES`).
    public static let nonceBytes = 24
    /// Tag length (`crypto_aead_xchacha20poly1305_ietf_ABYTES`).
    public static let tagBytes = 16
    /// What sealing adds to the plaintext length.
    public static let overhead = 1 + nonceBytes + tagBytes

    /// Encrypts with a fresh random nonce
    /// (calls `crypto_aead_xchacha20poly1305_ietf_encrypt`).
    public static func seal(_ plaintext: UnsafeRawBufferPointer, key: SecretKey, associatedData: [UInt8]) -> [UInt8] {
        Sodium.ensureReady()
        var nonce = [UInt8](repeating: 0, count: nonceBytes)
        nonce.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, nonceBytes) }
        return seal(plaintext, key: key, nonce: nonce, associatedData: associatedData)
    }

    /// Encrypts `plaintext` given as an array.
    public static func seal(_ plaintext: [UInt8], key: SecretKey, associatedData: [UInt8]) -> [UInt8] {
        plaintext.withUnsafeBytes { seal($0, key: key, associatedData: associatedData) }
    }

    /// Encrypts with the given nonce; only known-answer tests should choose nonces.
    public static func seal(_ plaintext: UnsafeRawBufferPointer, key: SecretKey, nonce: [UInt8], associatedData: [UInt8]) -> [UInt8] {
        precondition(nonce.count == nonceBytes)
        var out = [UInt8](repeating: 0, count: 1 + nonceBytes + plaintext.count + tagBytes)
        out[0] = version
        out.replaceSubrange(1...nonceBytes, with: nonce)
        var written: UInt64 = 0
        let ptBase = plaintext.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!
        let r = out.withUnsafeMutableBytes { o in
            key.withUnsafeBytes { k in
                associatedData.withUnsafeBytes { ad in
                    crypto_aead_xchacha20poly1305_ietf_encrypt(
                        o.baseAddress!.advanced(by: 1 + nonceBytes).assumingMemoryBound(to: UInt8.self), &written,
                        ptBase.assumingMemoryBound(to: UInt8.self), UInt64(plaintext.count),
                        ad.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(ad.count),
                        nil,
                        o.baseAddress!.advanced(by: 1).assumingMemoryBound(to: UInt8.self),
                        k.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
        }
        precondition(r == 0 && Int(written) == plaintext.count + tagBytes, "XChaCha20-Poly1305 encryption cannot fail")
        return out
    }

    /// Decrypts and verifies; the plaintext is passed to `body` in a buffer
    /// that is wiped (`sodium_memzero`) as soon as `body` returns.
    /// Calls `crypto_aead_xchacha20poly1305_ietf_decrypt`.
    public static func open<R>(_ sealed: [UInt8], key: SecretKey, associatedData: [UInt8],
                               _ body: (UnsafeRawBufferPointer) throws -> R) throws -> R {
        Sodium.ensureReady()
        guard sealed.count >= overhead else { throw CryptoError(.malformed, "sealed data is too short (\(sealed.count) bytes)") }
        guard sealed[0] == version else { throw CryptoError(.malformed, "sealed data has unknown format version \(sealed[0])") }
        let ptLen = sealed.count - overhead
        var plain = [UInt8](repeating: 0, count: max(ptLen, 1))
        defer { secureZero(&plain) }
        var written: UInt64 = 0
        let r = plain.withUnsafeMutableBytes { p in
            sealed.withUnsafeBytes { s in
                key.withUnsafeBytes { k in
                    associatedData.withUnsafeBytes { ad in
                        crypto_aead_xchacha20poly1305_ietf_decrypt(
                            p.baseAddress!.assumingMemoryBound(to: UInt8.self), &written, nil,
                            s.baseAddress!.advanced(by: 1 + nonceBytes).assumingMemoryBound(to: UInt8.self), UInt64(sealed.count - 1 - nonceBytes),
                            ad.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(ad.count),
                            s.baseAddress!.advanced(by: 1).assumingMemoryBound(to: UInt8.self),
                            k.baseAddress!.assumingMemoryBound(to: UInt8.self))
                    }
                }
            }
        }
        guard r == 0 else { throw CryptoError(.authenticationFailed, "sealed data failed authentication (wrong key, or tampered)") }
        return try plain.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<Int(written)])) }
    }

    /// Seals a key under another key (key wrapping).
    public static func wrap(_ key: SecretKey, under wrappingKey: SecretKey, associatedData: [UInt8]) -> [UInt8] {
        key.withUnsafeBytes { seal($0, key: wrappingKey, associatedData: associatedData) }
    }

    /// Opens a wrapped key straight into guarded memory.
    public static func unwrap(_ sealed: [UInt8], under wrappingKey: SecretKey, associatedData: [UInt8]) throws -> SecretKey {
        try open(sealed, key: wrappingKey, associatedData: associatedData) { plain in
            try SecretKey(SecureBytes(count: plain.count) { dst in dst.copyMemory(from: plain) })
        }
    }
}
