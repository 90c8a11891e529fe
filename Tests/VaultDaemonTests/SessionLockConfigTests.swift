import Testing
import VaultDaemon
import VaultModel

@Suite struct SessionLockConfigTests {
    func parse(_ text: String) throws(VaultError) -> Config { try Config.parse(Array(text.utf8), source: "test.json") }

    @Test func grace_default_isTenSeconds() throws {
        #expect(try parse("{}").sessionLockGraceSeconds == 10)
    }

    @Test func grace_given_isUsed() throws {
        #expect(try parse(#"{"session_lock_grace_seconds": 0.5}"#).sessionLockGraceSeconds == 0.5)
        #expect(try parse(#"{"session_lock_grace_seconds": 0}"#).sessionLockGraceSeconds == 0)
    }

    @Test(arguments: [#"{"session_lock_grace_seconds": "10"}"#, #"{"session_lock_grace_seconds": -1}"#, #"{"session_lock_grace_seconds": 100000}"#])
    func grace_wrongTypeOrRange_namesTheKey(_ text: String) {
        do {
            _ = try parse(text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.code == .badInput)
            #expect(error.message.contains("session_lock_grace_seconds"))
        }
    }

    @Test func grace_misspelt_isAnUnknownKey() {
        do {
            _ = try parse(#"{"session_lock_grace": 5}"#)
            Issue.record("accepted a misspelt key")
        } catch {
            #expect(error.message.contains("session_lock_grace") && error.message.contains("unknown key"))
        }
    }
}
