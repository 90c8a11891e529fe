import Testing
import VaultModel
@testable import VaultStore

/// The associated data sealed into every item must never change: a vault
/// written by an earlier build has to open with this one.
@Suite("Associated data")
struct AssociatedDataTests {
    @Test(arguments: AccessMode.allCases)
    func item_isTheLengthPrefixedEncodingOfItsFourFields(mode: AccessMode) {
        let key = ItemKey(provider: "github.com", account: "alice@example.org", kind: .token)
        #expect(AssociatedData.item(key, mode: mode) == AssociatedData.encode("tokenvault/item/v1", [key.provider, key.account, key.kind.rawValue, mode.rawValue]))
    }

    @Test func item_bytes_areFixed() {
        let key = ItemKey(provider: "gh", account: "default", kind: .token)
        var expected = Array("tokenvault/item/v1".utf8)
        for field in ["gh", "default", "token", "always"] {
            expected += [0, 0, 0, UInt8(field.utf8.count)] + Array(field.utf8)
        }
        #expect(AssociatedData.item(key, mode: .always) == expected)
    }
}
