import VaultModel

/// A small argument parser shaped like swift-argument-parser: options with
/// values, flags, and positionals, with usage errors (exit 64) for anything
/// unknown or missing.
struct Arguments {
    private(set) var positionals: [String] = []
    private var values: [String: String] = [:]
    private var flags: Set<String> = []

    /// Splits `args` given which options take a value and which are flags.
    init(_ args: [String], options: Set<String>, flags allowedFlags: Set<String>) throws(VaultError) {
        var i = 0
        var onlyPositionals = false
        while i < args.count {
            let a = args[i]
            i += 1
            if onlyPositionals || !a.hasPrefix("-") || a == "-" {
                positionals.append(a)
                continue
            }
            if a == "--" { onlyPositionals = true; continue }
            var name = a
            var inline: String?
            if let eq = a.firstIndex(of: "="), a.hasPrefix("--") {
                name = String(a[..<eq])
                inline = String(a[a.index(after: eq)...])
            }
            if options.contains(name) {
                if let inline { values[name] = inline; continue }
                guard i < args.count else { throw VaultError(.usage, "\(name) needs a value") }
                values[name] = args[i]
                i += 1
            } else if allowedFlags.contains(name), inline == nil {
                flags.insert(name)
            } else {
                throw VaultError(.usage, "unknown option \(ItemName.printable(a))")
            }
        }
    }

    func value(_ name: String) -> String? { values[name] }
    func flag(_ name: String) -> Bool { flags.contains(name) }

    /// Exactly `count` positionals, named in the error.
    func expectPositionals(_ names: [String]) throws(VaultError) {
        if positionals.count < names.count { throw VaultError(.usage, "missing \(names[positionals.count].uppercased())") }
        if positionals.count > names.count { throw VaultError(.usage, "unexpected argument \(ItemName.printable(positionals[names.count]))") }
    }
}
