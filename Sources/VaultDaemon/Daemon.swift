@preconcurrency import Glibc
import VaultModel
import VaultOAuth
import VaultProtocol
import VaultStore
import VaultSystem

/// The daemon's life: start (config, store, vault, socket), serve, reload
/// on SIGHUP, and stop cleanly on SIGTERM.
public enum Daemon {
    /// Runs until SIGTERM/SIGINT; returns the exit status.
    public static func main(arguments: [String]) -> Int32 {
        if arguments.contains("-h") || arguments.contains("--help") {
            print(DaemonOptions.usage)
            return 0
        }
        if arguments.contains("--version") {
            print("tokenvaultd \(version)")
            return 0
        }
        let options: DaemonOptions
        do { options = try DaemonOptions.parse(arguments) } catch {
            fputs("tokenvaultd: \(error.message)\n\(DaemonOptions.usage)\n", stderr)
            return error.code.exitCode
        }
        let logger = Logger(level: options.logLevel)
        do {
            return try run(options, logger: logger)
        } catch {
            logger.error("cannot start: \(error.message)")
            return error.code.exitCode
        }
    }

    /// The version string.
    public static let version = "0.1.0"

    static func run(_ options: DaemonOptions, logger: Logger) throws(VaultError) -> Int32 {
        do { try ProcessHardening.disableCoreDumps() } catch { logger.warning("core dumps could not be disabled: \(error)") }
        ProcessHardening.ignoreSIGPIPE()
        // Signals go to one waiting thread; block them before any thread starts.
        let signals = [SIGTERM, SIGINT, SIGHUP, SIGUSR1]
        // Test seam for wall-clock jumps: the file holds seconds to add to the clock; SIGUSR1 re-reads it.
        let clockFile = Environment.get("TOKENVAULT_TEST_CLOCK_FILE")
        @Sendable func readClockOffset() {
            guard let clockFile, let bytes = try? FileSystem.read(clockFile, limit: 64),
                  let offset = Double(String(decoding: bytes, as: UTF8.self).filter { !$0.isWhitespace }) else { return }
            WallClock.offset = offset
            logger.warning("test clock: wall clock offset by \(offset) s (TOKENVAULT_TEST_CLOCK_FILE)")
        }
        readClockOffset()
        blockSignals(signals)

        let config = try Config.load(path: options.configPath)
        let opened = try openStore(options, config: config)
        let machineID = try MachineIdentity.read()
        let vault = try Vault(store: opened.store, keyFiles: opened.keyFiles, machineID: machineID)
        // secret-service branch: lock watchers (session lock, Secret Service collection) and migration.
        let watchers = LockWatchers(vault: vault, grace: .milliseconds(Int(config.sessionLockGraceSeconds * 1000)), logger: logger)
        try watchers.start(enableSessionWatcher: true)
        let migrator = StoreMigrator(placement: placement(options)) { store in watchers.follow(store) }
        let audit = try AuditLog(path: options.auditLogPath)
        let listener = try listen(options, logger: logger)
        let socketShown = listener.boundPath ?? "\(options.socketPath) (from systemd)"
        let providers = ProviderDirectory(config: config, client: TokenEndpointClient())
        let engine: RefreshEngine
        do {
            engine = try RefreshEngine(vault: vault, providers: providers, client: providers.client, logger: logger, notifier: Notifier(logger: logger))
            try engine.start()
        } catch {
            throw VaultError(.failure, "cannot start the refresh engine: \(error)")
        }
        let service = VaultService(vault: vault, providers: providers, engine: engine, configPath: options.configPath, storeReason: opened.reason,
                                   socketPath: socketShown, logger: logger, audit: audit,
                                   migrator: migrator, sessionLockWatcherStatus: { watchers.session.status })
        let server: SocketServer
        do { server = try SocketServer(listener: listener, service: service, logger: logger, limits: options.limits) } catch {
            throw VaultError(.failure, "\(error)")
        }
        do {
            try spawnThread {
                while true {
                    let sig = waitForSignal(signals)
                    if sig == SIGUSR1 {
                        readClockOffset()
                        engine.clockChanged()
                        continue
                    }
                    if sig == SIGHUP {
                        do {
                            service.replaceConfig(try Config.load(path: options.configPath))
                            logger.info("config reloaded from \(options.configPath)")
                        } catch {
                            logger.error("config reload failed, keeping the old config: \(error)")
                        }
                        continue
                    }
                    logger.info("received \(sig == SIGTERM ? "SIGTERM" : "SIGINT"), stopping")
                    SystemdNotify.send("STOPPING=1")
                    engine.stop()
                    server.stop()
                    return
                }
            }
        } catch {
            throw VaultError(.failure, "cannot start the signal thread: \(error)")
        }
        let status = vault.status
        logger.info("ready: \(status.itemCount) item(s) in \(status.backend) store \(status.location), vault \(status.lockState.rawValue), socket \(socketShown)")
        SystemdNotify.send("READY=1\nSTATUS=serving \(status.itemCount) item(s)")
        server.run()
        if !server.waitForConnections(timeoutMs: 10_000) {
            logger.warning("\(server.connectionCount) connection(s) still busy after 10 s; exiting anyway")
        }
        if !engine.waitForFlights(timeoutMs: 10_000) {
            logger.warning("a refresh is still running after 10 s; exiting anyway")
        }
        vault.lock()
        listener.unlinkPath()
        logger.info("stopped")
        return 0
    }

    /// Chooses and opens the store (PRODUCT.md section 2), with the reason for `status`.
    static func openStore(_ options: DaemonOptions, config: Config) throws(VaultError) -> OpenedStore {
        let choice: String
        let source: String
        if let c = options.storeChoice, let s = options.storeChoiceSource {
            choice = c
            source = s
        } else {
            choice = config.store.rawValue
            source = config.store == .auto ? "default" : "config"
        }
        return try placement(options).open(choice: choice, source: source)
    }

    /// Store placement for the data folder; `TOKENVAULT_SECRET_SERVICE_PROBE_MS` tunes the `auto` probe (tests).
    static func placement(_ options: DaemonOptions) -> StorePlacement {
        var p = StorePlacement(dataFolder: options.dataFolder)
        if let v = Environment.get("TOKENVAULT_SECRET_SERVICE_PROBE_MS"), let ms = Int(v), ms > 0 { p.probeTimeout = .milliseconds(ms) }
        return p
    }

    /// The inherited socket (systemd `LISTEN_FDS`), or a new one at the socket path.
    static func listen(_ options: DaemonOptions, logger: Logger) throws(VaultError) -> UnixListener {
        let inherited = SystemdNotify.listenFDs()
        if let fd = inherited.first {
            do {
                let l = try UnixListener.adopt(fd: fd)
                logger.info("using the socket passed by systemd (fd \(fd))")
                return l
            } catch {
                throw VaultError(.failure, "the socket passed by systemd is unusable: \(error)")
            }
        }
        let folder = FileSystem.parent(of: options.socketPath)
        do {
            if !FileSystem.exists(folder) {
                try FileSystem.makeFolders(folder, mode: 0o700)
            }
        } catch {
            throw VaultError(.failure, "cannot create socket folder \(folder): \(error)")
        }
        if options.socketIsDefault { try SocketPath.checkFolder(folder) }
        do {
            return try UnixListener.bind(path: options.socketPath)
        } catch {
            if error.errno == EADDRINUSE { throw VaultError(.failure, "another tokenvaultd is already serving \(options.socketPath)") }
            throw VaultError(.failure, "cannot listen on \(options.socketPath): \(error)")
        }
    }
}
