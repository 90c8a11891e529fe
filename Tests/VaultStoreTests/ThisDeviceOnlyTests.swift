import Testing
import VaultModel
import VaultStore

/// PRODUCT.md section 3: `*-this-device-only` class keys are bound to the
/// machine identity; the same files on another machine cannot open them.
@Suite("This device only")
struct ThisDeviceOnlyTests {
    @Test("a copied store on another machine opens only the portable modes", arguments: [true, false])
    func open_onAnotherMachine_refusesThisDeviceOnlyItems_andOpensTheOthers(withPassphrase: Bool) throws {
        try withVaultFolder { folder in
            let modes = AccessMode.allCases.filter { withPassphrase || $0 != .whenPasscodeSetThisDeviceOnly }
            do {
                let (_, vault) = try folder.open()
                if withPassphrase { try vault.initialize(passphrase: passphrase("pass")) }
                for mode in modes { try vault.put(itemKey(for: mode), mode: mode, text: "secret-" + mode.rawValue) }
            }

            let elsewhere = try folder.reopen(machineID: "other-machine")
            if withPassphrase {
                // Before any unlock, only `always` is readable; its device-bound twin is not.
                let early = vaultError { _ = try elsewhere.secretText(itemKey(for: .alwaysThisDeviceOnly)) }
                #expect(early?.code == .failure)
                #expect(early?.message.contains("another machine") == true)
                #expect(try elsewhere.secretText(itemKey(for: .always)) == "secret-always")
                try elsewhere.unlock(passphrase: passphrase("pass"))
            }
            let readable = Dictionary(uniqueKeysWithValues: elsewhere.list().map { ($0.item.key, $0.readable) })
            for mode in modes {
                let key = itemKey(for: mode)
                if mode.isThisDeviceOnly {
                    let error = vaultError { _ = try elsewhere.secretText(key) }
                    #expect(error?.code == .failure, "\(mode.rawValue)")
                    #expect(error?.message.contains("another machine") == true, "\(String(describing: error))")
                    #expect(error?.message.contains(key.description) == true)
                    #expect(readable[key] == false)
                } else {
                    #expect(try elsewhere.secretText(key) == "secret-" + mode.rawValue)
                    #expect(readable[key] == true)
                }
            }

            // Nothing was damaged: back on this machine every item opens.
            let home = try folder.reopen()
            if withPassphrase { try home.unlock(passphrase: passphrase("pass")) }
            for mode in modes { #expect(try home.secretText(itemKey(for: mode)) == "secret-" + mode.rawValue) }
        }
    }
}
