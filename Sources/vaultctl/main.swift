@preconcurrency import Glibc
import TokenVaultClient
import VaultModel

/// The verbs, in the order `--help` lists them.
nonisolated(unsafe) let commands: [any Command.Type] = [  // written once, before any thread starts
    InitCommand.self, AddCommand.self, LoginCommand.self, ListCommand.self, TokenCommand.self, HeaderCommand.self, RevokeCommand.self,
    RefreshCommand.self, Report401Command.self, ClientSecretCommand.self, ProvidersCommand.self,
    LockCommand.self, UnlockCommand.self, PassphraseCommand.self, StatusCommand.self,
    MigrateCommand.self,
]

let exitCodes = """
    Exit codes (the same for every verb):
      0   done
      1   any other failure (message on stderr)
      3   no such provider or item
      4   locked: the item's access mode does not allow it now
      5   needs re-authentication (invalid_grant, revoked, expired without refresh)
      64  usage error
      65  bad input data: malformed token JSON, bad config
      69  daemon unavailable
      75  temporary failure: retry later
      77  denied: wrong passphrase, client not allowed
    """

func rootHelp() -> String {
    var s = "Usage: vaultctl [--socket PATH] VERB [options]\n\nTokenVault's command line: talks to tokenvaultd over its Unix socket.\n\nVerbs:\n"
    let width = commands.map { $0.name.count }.max() ?? 0
    for c in commands { s += "  \(c.name)\(String(repeating: " ", count: width - c.name.count))  \(c.summary)\n" }
    s += "\nCommon options:\n\(Common.help)\n\nRun `vaultctl VERB --help` for a verb's options.\n\n\(exitCodes)\n"
    return s
}

func verbHelp(_ c: any Command.Type) -> String {
    "Usage: vaultctl \(c.usage)\n\nOptions for every verb:\n\(Common.help)\n\n\(exitCodes)\n"
}

func fail(_ code: VaultError.Code, _ message: String) -> Never {
    Output.err("vaultctl: \(message)\n")
    exit(code.exitCode)
}

var argv = Array(CommandLine.arguments.dropFirst())
// Common options may also come before the verb (`vaultctl --socket PATH list`);
// they are handed to the verb's parser like its own.
var leadingOptions: [String] = []
while let first = argv.first, first == "--socket" || first.hasPrefix("--socket=") {
    let n = first == "--socket" ? 2 : 1
    guard argv.count >= n else { fail(.usage, "--socket needs a value") }
    leadingOptions += argv.prefix(n)
    argv.removeFirst(n)
}
guard let verb = argv.first else {
    Output.err(rootHelp())
    exit(VaultError.Code.usage.exitCode)
}
if verb == "--help" || verb == "-h" || verb == "help" {
    Output.out(rootHelp())
    exit(0)
}
if verb == "--version" {
    Output.out("vaultctl 0.1.0\n")
    exit(0)
}
guard let command = commands.first(where: { $0.name == verb }) else {
    fail(.usage, "unknown verb \(ItemName.printable(verb)); see vaultctl --help")
}
let rest = leadingOptions + Array(argv.dropFirst())
if rest.contains("--help") || rest.contains("-h") {
    Output.out(verbHelp(command))
    exit(0)
}
let parsed: any Command
let socket: String?
do {
    let args = try Arguments(rest, options: command.options.union(Common.options), flags: command.flags.union(Common.flags))
    socket = args.value("--socket")
    parsed = try command.init(args)
} catch {
    fail(error.code, "\(error.message)\nUsage: vaultctl \(command.usage.split(separator: "\n").first ?? "")")
}
do {
    try parsed.run(TokenVaultClient(socketPath: socket))
} catch {
    fail(error.code, error.message)
}
exit(0)
