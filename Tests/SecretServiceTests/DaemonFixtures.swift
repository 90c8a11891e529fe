@preconcurrency import Glibc
import Foundation
import Testing
import TokenVaultClient
import VaultModel

/// The package's debug build products folder (tokenvaultd and vaultctl).
func productsFolder() throws -> String {
    var candidates: [String] = []
    if let runner = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") { candidates.append((runner as NSString).deletingLastPathComponent) }
    let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    candidates.append(package.appendingPathComponent(".build/debug").path)
    guard let folder = candidates.first(where: { access($0 + "/tokenvaultd", X_OK) == 0 && access($0 + "/vaultctl", X_OK) == 0 }) else {
        throw SetupError("tokenvaultd and vaultctl not found next to the test runner; run `swift build --build-tests` first")
    }
    return folder
}

/// One `tokenvaultd` process on private folders, and `vaultctl` against it.
final class DaemonUnderTest {
    let folder: String
    let products: String
    var environment: [String: String]
    var process: Process?
    var dataFolder: String { folder + "/data" }
    var socket: String { folder + "/s" }

    /// `sessionBus`: the address (nil: a path where no bus listens). `systemBus` likewise.
    init(sessionBus: String?, systemBus: String? = nil, config: String = "{}") throws {
        products = try productsFolder()
        folder = try makeTemporaryFolder("tvd")
        mkdir(folder + "/run", 0o700)
        try config.write(toFile: folder + "/config.json", atomically: true, encoding: .utf8)
        var env = ProcessInfo.processInfo.environment
        for k in ["DISPLAY", "WAYLAND_DISPLAY", "XDG_SESSION_ID", "TOKENVAULT_STORE"] { env[k] = nil }
        env["DBUS_SESSION_BUS_ADDRESS"] = sessionBus ?? "unix:path=\(folder)/no-session-bus"
        env["DBUS_SYSTEM_BUS_ADDRESS"] = systemBus ?? "unix:path=\(folder)/no-system-bus"
        env["XDG_RUNTIME_DIR"] = folder + "/run"
        env["TOKENVAULT_SOCKET"] = folder + "/s"
        env["TOKENVAULT_DATA_DIR"] = folder + "/data"
        env["TOKENVAULT_CONFIG"] = folder + "/config.json"
        env["TOKENVAULT_AUDIT_LOG"] = folder + "/audit.log"
        environment = env
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// Starts the daemon and waits until it answers `status`.
    func start(_ arguments: [String] = []) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: products + "/tokenvaultd")
        p.arguments = arguments
        p.environment = environment
        p.standardError = FileHandle(forWritingAtPath: "/dev/null")
        if FileManager.default.createFile(atPath: folder + "/daemon.log", contents: nil), let log = FileHandle(forWritingAtPath: folder + "/daemon.log") {
            log.seekToEndOfFile()
            p.standardError = log
        }
        try p.run()
        process = p
        let up = waitUntil(15) { !p.isRunning || (try? vaultctl(["status"]).status == 0) == true }
        guard up, p.isRunning else { throw SetupError("tokenvaultd did not start: \(log)") }
    }

    /// Starts the daemon expecting it to refuse; returns its exit status and log.
    func startExpectingFailure(_ arguments: [String] = []) throws -> (Int32, String) {
        let r = try runProgram(products + "/tokenvaultd", arguments, environment: environment)
        return (r.status, r.err)
    }

    var log: String { (try? String(contentsOfFile: folder + "/daemon.log", encoding: .utf8)) ?? "" }

    func stop() {
        guard let p = process, p.isRunning else { return }
        p.terminate()
        p.waitUntilExit()
        process = nil
    }

    func kill() {
        guard let p = process else { return }
        Glibc.kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        process = nil
    }

    @discardableResult
    func vaultctl(_ arguments: [String], stdin: String? = nil) throws -> (status: Int32, out: String, err: String) {
        try runProgram(products + "/vaultctl", arguments, environment: environment, stdin: stdin)
    }

    /// `vaultctl status --json` as an object.
    func status() throws -> [String: Any] {
        let r = try vaultctl(["status", "--json"])
        guard r.status == 0, let o = try JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [String: Any] else {
            throw SetupError("vaultctl status failed (\(r.status)): \(r.err)")
        }
        return o
    }

    func add(_ provider: String, account: String = "default", mode: String, token: String) throws {
        let r = try vaultctl(["add", provider, "--account", account, "--mode", mode],
                             stdin: "{\"access_token\":\"\(token)\",\"token_type\":\"bearer\",\"expires_in\":86400}")
        guard r.status == 0 else { throw SetupError("vaultctl add failed (\(r.status)): \(r.err)") }
    }

    func client() -> TokenVaultClient { TokenVaultClient(socketPath: socket, timeout: 30) }
}

/// A private system bus (dbus-daemon with a permissive config) with
/// python3-dbusmock's logind template on it, torn down when the test
/// process ends or `stop` runs.
final class MockLogind {
    let address: String
    let folder: String
    private let helper: HeldProcess

    static var toolsPresent: Bool {
        findProgram("dbus-daemon") != nil && findProgram("gdbus") != nil && access("/usr/bin/python3", X_OK) == 0
            && FileManager.default.fileExists(atPath: "/usr/lib/python3/dist-packages/dbusmock/templates/logind.py")
    }

    init() throws {
        folder = try makeTemporaryFolder("tvsb")
        let config = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>system</type>
              <listen>unix:path=\(folder)/system_bus_socket</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow user="*"/>
                <allow own="*"/>
                <allow send_destination="*"/>
                <allow receive_sender="*"/>
              </policy>
            </busconfig>
            """
        try config.write(toFile: folder + "/system.conf", atomically: true, encoding: .utf8)
        let script = """
            dir="$1"
            dbus-daemon --config-file="$dir/system.conf" --nofork --print-address=1 > "$dir/addr" 2>/dev/null &
            bus=$!
            trap 'kill $mock $bus 2>/dev/null' EXIT
            for i in $(seq 200); do [ -s "$dir/addr" ] && break; sleep 0.05; done
            export DBUS_SYSTEM_BUS_ADDRESS=$(head -n1 "$dir/addr")
            /usr/bin/python3 -m dbusmock --system --template logind >"$dir/mock.log" 2>&1 &
            mock=$!
            gdbus wait --system --timeout 10 org.freedesktop.login1 || exit 1
            echo "PIDS=$bus $mock"
            echo "ADDRESS=$DBUS_SYSTEM_BUS_ADDRESS"
            cat >/dev/null
            """
        helper = try HeldProcess("/bin/sh", ["-c", script, "sh", folder], environment: ProcessInfo.processInfo.environment)
        address = try helper.waitForLine("ADDRESS=", seconds: 20)
        pids = try helper.waitForLine("PIDS=", seconds: 1).split(separator: " ").compactMap { Int32($0) }
    }

    /// The bus and the mock: killed by pid (SIGKILL: the test process's children may inherit a blocked SIGTERM).
    private let pids: [Int32]

    deinit {
        for pid in pids { Glibc.kill(pid, SIGKILL) }
        Glibc.kill(helper.process.processIdentifier, SIGKILL)
        helper.stop()
        try? FileManager.default.removeItem(atPath: folder)
    }

    @discardableResult
    func call(_ path: String, _ method: String, _ args: [String]) throws -> String {
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SYSTEM_BUS_ADDRESS"] = address
        let r = try runProgram("gdbus", ["call", "--system", "--dest", "org.freedesktop.login1", "--object-path", path, "--method", method] + args, environment: env)
        guard r.status == 0 else { throw SetupError("gdbus \(method) failed: \(r.err)") }
        return r.out
    }

    func addSession(_ id: String) throws {
        try call("/org/freedesktop/login1", "org.freedesktop.DBus.Mock.AddSession", [id, "seat0", "\(getuid())", "tester", "true"])
    }

    func setLockedHint(_ id: String, _ locked: Bool) throws {
        try call("/org/freedesktop/login1/session/\(id)", "org.freedesktop.login1.Session.SetLockedHint", [locked ? "true" : "false"])
    }

    func emitPrepareForSleep(_ sleeping: Bool) throws {
        try call("/org/freedesktop/login1", "org.freedesktop.DBus.Mock.EmitSignal",
                 ["org.freedesktop.login1.Manager", "PrepareForSleep", "b", "[<\(sleeping)>]"])
    }
}
