/// When an item may be read, modelled on keychain accessibility
/// (PRODUCT.md section 3).
public enum AccessMode: String, Sendable, CaseIterable, Codable {
    case whenUnlocked = "when-unlocked"
    case afterFirstUnlock = "after-first-unlock"
    case always = "always"
    case whenPasscodeSetThisDeviceOnly = "when-passcode-set-this-device-only"
    case whenUnlockedThisDeviceOnly = "when-unlocked-this-device-only"
    case afterFirstUnlockThisDeviceOnly = "after-first-unlock-this-device-only"
    case alwaysThisDeviceOnly = "always-this-device-only"

    /// The mode used when neither the request nor the provider names one.
    public static let `default`: AccessMode = .afterFirstUnlock

    /// How the mode behaves with respect to the vault's lock state.
    public enum Availability: Sendable {
        /// Only while the vault is unlocked.
        case whenUnlocked
        /// Once the vault has been unlocked since the daemon started.
        case afterFirstUnlock
        /// Always, even before the first unlock.
        case always
    }

    /// The lock-state rule of this mode.
    public var availability: Availability {
        switch self {
        case .whenUnlocked, .whenPasscodeSetThisDeviceOnly, .whenUnlockedThisDeviceOnly: return .whenUnlocked
        case .afterFirstUnlock, .afterFirstUnlockThisDeviceOnly: return .afterFirstUnlock
        case .always, .alwaysThisDeviceOnly: return .always
        }
    }

    /// Whether items of this mode never leave the machine.
    public var isThisDeviceOnly: Bool {
        switch self {
        case .whenPasscodeSetThisDeviceOnly, .whenUnlockedThisDeviceOnly, .afterFirstUnlockThisDeviceOnly, .alwaysThisDeviceOnly: return true
        default: return false
        }
    }

    /// Whether the class key is wrapped by the device key (else by the vault key).
    public var isWrappedByDeviceKey: Bool { availability == .always }

    /// Whether an item of this mode can be read in `state`.
    public func isReadable(in state: LockState) -> Bool {
        switch availability {
        case .always: return true
        case .afterFirstUnlock: return state != .lockedSinceStart
        case .whenUnlocked: return state == .unlocked
        }
    }

    /// The names, for help texts and errors.
    public static var allNames: String { allCases.map(\.rawValue).joined(separator: ", ") }
}

/// The vault's lock state: `locked-since-start` → `unlocked` ⇄ `locked`.
public enum LockState: String, Sendable, Codable {
    case lockedSinceStart = "locked-since-start"
    case unlocked = "unlocked"
    case locked = "locked"
}

/// What `vaultctl list` shows for an item (PRODUCT.md section 4).
public enum ItemState: String, Sendable, Codable {
    case valid, refreshing, expired, locked
    case needsReauth = "needs-reauth"
}
