import Testing
import VaultModel

/// The access-mode table of PRODUCT.md section 3, written out by hand so the
/// vault tests (which ask `isReadable(in:)`) rest on the spec, not on themselves.
@Suite("Access mode table")
struct AccessModeTests {
    /// name, readable before any unlock, while unlocked, after a lock, this device only.
    static let table: [(String, Bool, Bool, Bool, Bool)] = [
        ("when-unlocked", false, true, false, false),
        ("after-first-unlock", false, true, true, false),
        ("always", true, true, true, false),
        ("when-passcode-set-this-device-only", false, true, false, true),
        ("when-unlocked-this-device-only", false, true, false, true),
        ("after-first-unlock-this-device-only", false, true, true, true),
        ("always-this-device-only", true, true, true, true),
    ]

    @Test func allCases_areExactlyTheSpecModes() {
        #expect(AccessMode.allCases.map(\.rawValue) == Self.table.map(\.0))
        #expect(AccessMode.default == .afterFirstUnlock)
    }

    @Test func isReadable_andThisDeviceOnly_matchTheSpecTable() throws {
        for (name, beforeUnlock, unlocked, locked, thisDeviceOnly) in Self.table {
            let mode = try #require(AccessMode(rawValue: name))
            #expect(mode.isReadable(in: .lockedSinceStart) == beforeUnlock, "\(name) before the first unlock")
            #expect(mode.isReadable(in: .unlocked) == unlocked, "\(name) while unlocked")
            #expect(mode.isReadable(in: .locked) == locked, "\(name) after a lock")
            #expect(mode.isThisDeviceOnly == thisDeviceOnly, "\(name) this device only")
            // The device key wraps exactly the `always*` class keys.
            #expect(mode.isWrappedByDeviceKey == name.hasPrefix("always"), "\(name) wrapping")
        }
    }

    @Test func lockState_namesAreTheSpecNames() {
        #expect([LockState.lockedSinceStart, .unlocked, .locked].map(\.rawValue) == ["locked-since-start", "unlocked", "locked"])
    }
}
