// swift-tools-version:6.0
// TokenVault: a per-user OAuth 2.0 token vault daemon for Linux.
import PackageDescription

let package = Package(
    name: "TokenVault",
    products: [
        .executable(name: "tokenvaultd", targets: ["tokenvaultd"]),
        .executable(name: "vaultctl", targets: ["vaultctl"]),
        .library(name: "TokenVaultClient", targets: ["TokenVaultClient"]),
    ],
    targets: [
        // C libraries from Debian, through pkg-config.
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "CSecret", pkgConfig: "libsecret-1", providers: [.apt(["libsecret-1-dev", "libglib2.0-dev"])]),
        // What Swift cannot reach through Glibc: SO_PEERCRED, accept4, prctl.
        .target(name: "CTokenVaultLinux"),

        // Shared vocabulary: JSON, access modes, error codes, time. No Foundation.
        .target(name: "VaultModel"),
        // Syscalls: descriptors, sockets, files, signals. No Foundation.
        .target(name: "VaultSystem", dependencies: ["CTokenVaultLinux"]),
        // libsodium behind opaque types.
        .target(name: "VaultCrypto", dependencies: ["CSodium"]),
        // Storage protocol, SQLite store, key hierarchy, lock state.
        .target(name: "VaultStore", dependencies: ["CSQLite", "VaultCrypto", "VaultModel", "VaultSystem"]),
        // secret-service branch: GDBus (GLib main loop, calls, signals) and the Secret Service store.
        .target(name: "VaultDBus", dependencies: ["CSecret", "VaultModel", "VaultSystem"]),
        .target(name: "VaultSecretService", dependencies: ["CSecret", "VaultDBus", "VaultStore", "VaultCrypto", "VaultModel"]),
        // Wire messages and framing, shared by daemon and client.
        .target(name: "VaultProtocol", dependencies: ["VaultModel", "VaultSystem"]),
        // The public client library.
        .target(name: "TokenVaultClient", dependencies: ["VaultProtocol", "VaultModel", "VaultSystem"]),
        // Token endpoint client, grants, discovery, revocation (FoundationNetworking).
        .target(name: "VaultOAuth", dependencies: ["VaultModel", "VaultCrypto"]),
        // The daemon's services.
        .target(name: "VaultDaemon", dependencies: ["VaultStore", "VaultProtocol", "VaultModel", "VaultSystem", "VaultCrypto", "VaultOAuth",
                                                  "VaultDBus", "VaultSecretService"]),

        .executableTarget(name: "tokenvaultd", dependencies: ["VaultDaemon", "VaultSystem"]),
        // Static Swift runtime: `vaultctl header` sits in front of every curl call,
        // and loading a dozen shared Swift libraries costs more than the request.
        .executableTarget(name: "vaultctl", dependencies: ["TokenVaultClient", "VaultProtocol", "VaultModel", "VaultSystem"],
                          linkerSettings: [.unsafeFlags(["-static-stdlib"])]),
        // Benchmarks (`make bench`) and test helpers; not shipped.
        .executableTarget(name: "tokenvault-bench", dependencies: ["VaultStore", "VaultDaemon", "TokenVaultClient", "VaultSystem", "VaultCrypto", "VaultSecretService"], path: "Benchmarks/tokenvault-bench"),
        .executableTarget(name: "vault-crash-writer", dependencies: ["VaultStore", "VaultSystem"], path: "Tests/Support/vault-crash-writer"),

        .testTarget(name: "VaultModelTests", dependencies: ["VaultModel"]),
        .testTarget(name: "VaultCryptoTests", dependencies: ["VaultCrypto"]),
        .testTarget(name: "VaultStoreTests", dependencies: ["VaultStore", "VaultCrypto", "VaultModel", "VaultSystem"]),
        .testTarget(name: "VaultDaemonTests", dependencies: ["VaultDaemon", "VaultProtocol", "VaultModel", "VaultOAuth"]),
        .testTarget(name: "SecretServiceTests", dependencies: ["VaultSecretService", "TokenVaultClient", "VaultDBus", "VaultStore", "VaultDaemon", "VaultCrypto", "VaultModel", "VaultSystem"]),
        .testTarget(name: "EndToEndTests", dependencies: ["TokenVaultClient", "VaultProtocol", "VaultModel", "VaultSystem"]),
    ],
    swiftLanguageModes: [.v6]
)
