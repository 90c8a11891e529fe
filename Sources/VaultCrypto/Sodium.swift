internal import CSodium

/// libsodium initialisation (`sodium_init`), done once before any other call.
enum Sodium {
    static let ready: Bool = sodium_init() >= 0

    static func ensureReady() {
        precondition(ready, "libsodium failed to initialise (sodium_init)")
    }
}

/// A libsodium call that failed; never carries key material.
public struct CryptoError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// Authentication failed: wrong key, tampered ciphertext or associated data.
        case authenticationFailed
        /// The sealed input is shorter than a nonce and a tag, or of an unknown version.
        case malformed
        /// Memory could not be allocated or locked.
        case outOfMemory
        /// Key derivation failed (usually memory).
        case derivationFailed
    }

    public let code: Code
    public let message: String

    init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}

/// Overwrites `bytes` with zeros in a way the compiler cannot elide (`sodium_memzero`).
public func secureZero(_ bytes: inout [UInt8]) {
    Sodium.ensureReady()
    bytes.withUnsafeMutableBytes { p in
        if let base = p.baseAddress { sodium_memzero(base, p.count) }
    }
}

/// `count` random bytes from the system generator (`randombytes_buf`).
public func randomBytes(_ count: Int) -> [UInt8] {
    Sodium.ensureReady()
    var out = [UInt8](repeating: 0, count: count)
    out.withUnsafeMutableBytes { p in randombytes_buf(p.baseAddress!, p.count) }
    return out
}

/// A random integer in `0..<upperBound` (`randombytes_uniform`), for jitter.
public func randomUniform(_ upperBound: UInt32) -> UInt32 {
    Sodium.ensureReady()
    return randombytes_uniform(upperBound)
}
