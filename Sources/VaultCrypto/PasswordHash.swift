internal import CSodium

/// Argon2id key derivation from a passphrase (`crypto_pwhash` with
/// `crypto_pwhash_ALG_ARGON2ID13`).
public enum PasswordHash {
    /// Salt length (`crypto_pwhash_SALTBYTES`).
    public static let saltBytes = 16

    /// Cost parameters, stored beside the salt so they can change later.
    public struct Parameters: Sendable, Equatable {
        public var opsLimit: UInt64
        public var memLimit: Int

        public init(opsLimit: UInt64, memLimit: Int) {
            self.opsLimit = opsLimit
            self.memLimit = memLimit
        }

        /// libsodium's interactive limits (`crypto_pwhash_opslimit_interactive()`, `…memlimit…`).
        public static var interactive: Parameters {
            Sodium.ensureReady()
            return Parameters(opsLimit: UInt64(crypto_pwhash_opslimit_interactive()), memLimit: crypto_pwhash_memlimit_interactive())
        }

        /// libsodium's minimum limits: for tests only, never for a real vault.
        public static var minimumForTests: Parameters {
            Sodium.ensureReady()
            return Parameters(opsLimit: UInt64(crypto_pwhash_opslimit_min()), memLimit: Int(crypto_pwhash_memlimit_min()))
        }
    }

    /// Derives a 32-byte key from `passphrase` and `salt` into guarded memory.
    public static func deriveKey(passphrase: SecureBytes, salt: [UInt8], parameters: Parameters) throws -> SecretKey {
        Sodium.ensureReady()
        guard salt.count == saltBytes else { throw CryptoError(.malformed, "salt must be \(saltBytes) bytes") }
        var status: Int32 = 0
        let bytes = try SecureBytes(count: SecretKey.byteCount) { out in
            status = passphrase.withUnsafeBytes { pw in
                salt.withUnsafeBytes { s in
                    crypto_pwhash(out.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(out.count),
                                  pw.baseAddress!.assumingMemoryBound(to: CChar.self), UInt64(pw.count),
                                  s.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                  parameters.opsLimit, parameters.memLimit, crypto_pwhash_ALG_ARGON2ID13)
                }
            }
        }
        guard status == 0 else { throw CryptoError(.derivationFailed, "Argon2id key derivation failed (out of memory?)") }
        return try SecretKey(bytes)
    }
}
