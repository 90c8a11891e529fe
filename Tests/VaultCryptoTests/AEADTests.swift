import Testing
import VaultCrypto

/// Decodes lowercase or uppercase hex; traps on bad input (test constants only).
func hex(_ text: String) -> [UInt8] {
    let digits = Array(text.utf8).filter { $0 != UInt8(ascii: " ") }
    precondition(digits.count % 2 == 0)
    func v(_ c: UInt8) -> UInt8 {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: preconditionFailure("bad hex digit")
        }
    }
    return stride(from: 0, to: digits.count, by: 2).map { v(digits[$0]) << 4 | v(digits[$0 + 1]) }
}

/// XChaCha20-Poly1305 as `AEAD` wraps it.
@Suite("AEAD")
struct AEADTests {
    /// draft-irtf-cfrg-xchacha-03, appendix A.3.1 ("Example and Test Vector for
    /// AEAD_XChaCha20_Poly1305"), the vector libsodium's test suite also uses.
    enum DraftA31 {
        static let key: [UInt8] = Array(0x80...0x9F)
        static let nonce: [UInt8] = Array(0x40...0x57)
        static let associatedData = hex("50515253c0c1c2c3c4c5c6c7")
        static let plaintext = Array("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.".utf8)
        static let ciphertext = hex("""
            bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb\
            731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c216cb96b72e1213b452\
            2f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff9\
            21f9664c97637da9768812f615c68b13b52e
            """)
        static let tag = hex("c0875924c1c7987947deafd8780acf49")
    }

    static func key(_ bytes: [UInt8]) throws -> SecretKey { try SecretKey(SecureBytes(copying: bytes)) }

    static func open(_ sealed: [UInt8], key: SecretKey, associatedData: [UInt8]) throws -> [UInt8] {
        try AEAD.open(sealed, key: key, associatedData: associatedData) { Array($0) }
    }

    @Test func seal_draftXChaChaVectorA31_givesThePublishedCiphertextAndTag() throws {
        #expect(DraftA31.plaintext.count == 114)
        #expect(DraftA31.ciphertext.count == DraftA31.plaintext.count)
        let key = try Self.key(DraftA31.key)
        let sealed = DraftA31.plaintext.withUnsafeBytes {
            AEAD.seal($0, key: key, nonce: DraftA31.nonce, associatedData: DraftA31.associatedData)
        }
        #expect(sealed.count == AEAD.overhead + DraftA31.plaintext.count)
        #expect(sealed[0] == 0x01)
        #expect(Array(sealed[1...24]) == DraftA31.nonce)
        #expect(Array(sealed[25..<(25 + DraftA31.ciphertext.count)]) == DraftA31.ciphertext)
        #expect(Array(sealed.suffix(AEAD.tagBytes)) == DraftA31.tag)
    }

    @Test func open_draftXChaChaVectorA31_givesThePlaintext() throws {
        let sealed = [AEAD.version] + DraftA31.nonce + DraftA31.ciphertext + DraftA31.tag
        let plain = try Self.open(sealed, key: Self.key(DraftA31.key), associatedData: DraftA31.associatedData)
        #expect(plain == DraftA31.plaintext)
    }

    @Test func seal_samePlaintextTwice_usesFreshNoncesAndBothOpen() throws {
        let key = try SecretKey.random()
        let plain = Array("refresh-token-value".utf8)
        let a = AEAD.seal(plain, key: key, associatedData: [1, 2, 3])
        let b = AEAD.seal(plain, key: key, associatedData: [1, 2, 3])
        #expect(a != b)
        #expect(a[1...24] != b[1...24])
        #expect(try Self.open(a, key: key, associatedData: [1, 2, 3]) == plain)
        #expect(try Self.open(b, key: key, associatedData: [1, 2, 3]) == plain)
    }

    @Test func seal_emptyPlaintext_roundTrips() throws {
        let key = try SecretKey.random()
        let sealed = AEAD.seal([], key: key, associatedData: [])
        #expect(sealed.count == AEAD.overhead)
        #expect(try Self.open(sealed, key: key, associatedData: []) == [])
    }

    @Test func open_withWrongKey_failsAuthentication() throws {
        let sealed = AEAD.seal(DraftA31.plaintext, key: try Self.key(DraftA31.key), associatedData: DraftA31.associatedData)
        var other = DraftA31.key
        other[31] ^= 0x01
        let error = try #require(throws: CryptoError.self) {
            try Self.open(sealed, key: Self.key(other), associatedData: DraftA31.associatedData)
        }
        #expect(error.code == .authenticationFailed)
    }

    @Test("wrong associated data fails authentication", arguments: [
        [], [0x50], hex("50515253c0c1c2c3c4c5c6c6"), hex("50515253c0c1c2c3c4c5c6c700"),
    ] as [[UInt8]])
    func open_withWrongAssociatedData_failsAuthentication(ad: [UInt8]) throws {
        let sealed = AEAD.seal(DraftA31.plaintext, key: try Self.key(DraftA31.key), associatedData: DraftA31.associatedData)
        let error = try #require(throws: CryptoError.self) { try Self.open(sealed, key: Self.key(DraftA31.key), associatedData: ad) }
        #expect(error.code == .authenticationFailed)
    }

    @Test func open_withAnyNonceCiphertextOrTagByteFlipped_failsAuthentication() throws {
        let key = try Self.key(DraftA31.key)
        let sealed = [AEAD.version] + DraftA31.nonce + DraftA31.ciphertext + DraftA31.tag
        for index in 1..<sealed.count {
            var tampered = sealed
            tampered[index] ^= 0x01
            let error = try #require(throws: CryptoError.self, "byte \(index)") {
                try Self.open(tampered, key: key, associatedData: DraftA31.associatedData)
            }
            #expect(error.code == .authenticationFailed, "byte \(index)")
        }
    }

    @Test func open_withUnknownVersionOrTruncatedBox_failsAsMalformed() throws {
        let key = try Self.key(DraftA31.key)
        var sealed = [AEAD.version] + DraftA31.nonce + DraftA31.ciphertext + DraftA31.tag
        sealed[0] = 0x02
        let version = try #require(throws: CryptoError.self) { try Self.open(sealed, key: key, associatedData: DraftA31.associatedData) }
        #expect(version.code == .malformed)
        let short = try #require(throws: CryptoError.self) {
            try Self.open(Array(sealed.prefix(AEAD.overhead - 1)), key: key, associatedData: [])
        }
        #expect(short.code == .malformed)
    }

    @Test func unwrap_withTheWrappingKey_givesTheSameKey_andWithAnotherFails() throws {
        let inner = try SecretKey.random()
        let outer = try SecretKey.random()
        let wrapped = AEAD.wrap(inner, under: outer, associatedData: Array("class-key".utf8))
        let back = try AEAD.unwrap(wrapped, under: outer, associatedData: Array("class-key".utf8))
        #expect(back.constantTimeEquals(inner))
        let error = try #require(throws: CryptoError.self) {
            try AEAD.unwrap(wrapped, under: SecretKey.random(), associatedData: Array("class-key".utf8))
        }
        #expect(error.code == .authenticationFailed)
    }
}

/// Secrets in memory: their descriptions never show the bytes.
@Suite("Secret memory")
struct SecretMemoryTests {
    static let bytes: [UInt8] = Array(0x80...0x9F)

    /// Ways the bytes could show up in a description: hex in both cases,
    /// decimal lists, and the raw text when they are printable.
    static func renderings(_ bytes: [UInt8]) -> [String] {
        let lower = bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }
        return [lower.prefix(4).joined(), lower.prefix(4).joined().uppercased(), lower.prefix(2).joined(separator: " "),
                bytes.prefix(3).map(String.init).joined(separator: ", "), String(bytes[0]) + ","]
    }

    static func dumped(_ value: some Any) -> String {
        var out = ""
        dump(value, to: &out)
        return out
    }

    @Test func secureBytes_descriptions_doNotContainTheBytes() throws {
        let secure = try SecureBytes(copying: Self.bytes)
        for text in [secure.description, secure.debugDescription, "\(secure)", String(reflecting: secure), Self.dumped(secure)] {
            #expect(text.contains("redacted") || text.contains("SecureBytes"))
            for r in Self.renderings(Self.bytes) { #expect(!text.contains(r), "\(text)") }
        }
    }

    @Test func secureBytes_withPrintableContent_doesNotShowTheText() throws {
        let passphrase = "correct horse battery staple"
        let secure = try SecureBytes(copying: Array(passphrase.utf8))
        for text in [secure.description, "\(secure)", String(reflecting: secure), Self.dumped(secure)] {
            #expect(!text.contains("horse"))
        }
        #expect(secure.count == passphrase.utf8.count)
        #expect(secure.withUnsafeBytes { Array($0) } == Array(passphrase.utf8))
    }

    @Test func secretKey_descriptions_doNotContainTheBytes() throws {
        let key = try SecretKey(SecureBytes(copying: Self.bytes))
        for text in [key.description, "\(key)", String(reflecting: key), Self.dumped(key)] {
            for r in Self.renderings(Self.bytes) { #expect(!text.contains(r), "\(text)") }
        }
        #expect(key.description == "SecretKey(redacted)")
    }

    @Test func secretKey_ofWrongLength_isRefused() throws {
        let error = try #require(throws: CryptoError.self) { try SecretKey(SecureBytes(copying: [1, 2, 3])) }
        #expect(error.code == .malformed)
    }

    @Test func constantTimeEquals_comparesContents() throws {
        let a = try SecureBytes(copying: Self.bytes)
        let b = try SecureBytes(copying: Self.bytes)
        var changed = Self.bytes
        changed[17] ^= 0x40
        #expect(a.constantTimeEquals(b))
        #expect(!a.constantTimeEquals(try SecureBytes(copying: changed)))
        #expect(!a.constantTimeEquals(try SecureBytes(copying: Array(Self.bytes.dropLast()))))
    }
}

/// Argon2id key derivation, at libsodium's minimum costs for speed.
@Suite("Password hash")
struct PasswordHashTests {
    static func derive(_ passphrase: String, _ salt: [UInt8]) throws -> SecretKey {
        try PasswordHash.deriveKey(passphrase: SecureBytes(copying: Array(passphrase.utf8)), salt: salt, parameters: .minimumForTests)
    }

    @Test func deriveKey_isDeterministicAndDependsOnPassphraseAndSalt() throws {
        let salt = [UInt8](repeating: 7, count: PasswordHash.saltBytes)
        var otherSalt = salt
        otherSalt[0] = 8
        let a = try Self.derive("passphrase", salt)
        #expect(a.constantTimeEquals(try Self.derive("passphrase", salt)))
        #expect(!a.constantTimeEquals(try Self.derive("passphrasf", salt)))
        #expect(!a.constantTimeEquals(try Self.derive("passphrase", otherSalt)))
    }

    @Test func deriveKey_withShortSalt_isRefused() throws {
        let error = try #require(throws: CryptoError.self) { try Self.derive("x", [1, 2, 3]) }
        #expect(error.code == .malformed)
    }
}
