import Foundation
import Testing

/// Running under systemd: socket activation and the user units (PRODUCT.md section 7).
extension EndToEnd {
    @Suite struct Systemd {
        static let unitsFolder = PackagePaths.root + "/systemd"
        static let service = unitsFolder + "/tokenvaultd.service"
        static let socket = unitsFolder + "/tokenvaultd.socket"
        static var unitsPresent: Bool {
            FileManager.default.fileExists(atPath: service) && FileManager.default.fileExists(atPath: socket)
        }

        @Test(.enabled(if: PackagePaths.executable("systemd-socket-activate") != nil,
                       "systemd-socket-activate is missing (Debian package systemd)"))
        func socketActivation_servesThroughTheInheritedSocket() throws {
            let h = try DaemonHarness()
            defer { h.finish() }
            let activator = try #require(PackagePaths.executable("systemd-socket-activate"))
            let socket = h.folder + "/sa.sock"
            // systemd-socket-activate passes on only the variables named with -E.
            let passed = DaemonHarness.environmentNames.flatMap { ["-E", $0] }
            try h.start(launcher: [activator, "-l", socket] + passed, socket: socket)

            let token = h.newToken()
            let add = try h.vaultctl(["--socket", socket, "add", "activated"], stdin: h.tokenJSON(token))
            #expect(add.status == 0, "\(add)")
            #expect(try h.vaultctl(["--socket", socket, "token", "activated"]).stdout == token + "\n")
            #expect(try h.vaultctl(["header", "activated", "--socket", socket]).stdout == "Authorization: Bearer \(token)\n")
            #expect(h.daemonLog.contains("using the socket passed by systemd"), "\(h.daemonLog)")
            #expect(!FileManager.default.fileExists(atPath: h.socketPath), "with an inherited socket the daemon binds none of its own")
            #expect(try h.vaultctl(["--socket", socket, "list", "--json"]).stdout.contains("\"activated\""))
            try h.stop()
        }

        @Test(.enabled(if: PackagePaths.executable("systemd-analyze") != nil, "systemd-analyze is missing (Debian package systemd)"),
              .enabled(if: unitsPresent, "systemd/tokenvaultd.service and systemd/tokenvaultd.socket are not in this tree yet"))
        func userUnits_passSystemdAnalyzeVerify() throws {
            let h = try DaemonHarness()
            defer { h.finish() }
            // Install the daemon where a user install puts it (HOME is the test folder), so
            // verify can check that ExecStart names an executable.
            try FileManager.default.createDirectory(atPath: h.folder + "/.local/bin", withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: h.folder + "/.local/bin/tokenvaultd", withDestinationPath: PackagePaths.tokenvaultd)
            let analyze = try #require(PackagePaths.executable("systemd-analyze"))
            let r = try h.run(analyze, ["--user", "verify", Self.service, Self.socket])
            #expect(r.status == 0, "systemd-analyze --user verify: \(r)")
        }
    }
}
