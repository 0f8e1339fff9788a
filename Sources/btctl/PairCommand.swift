// btctl pair / btctl bonds: pairing with a peer from the terminal (prompts on the
// terminal, or as JSON events with --json), and the bonds kept in the per-adapter
// bond file (docs/btctl.md).

import ArgumentParser
import BLE
import Foundation
import HCI
import SMP
import Snoop
import Synchronization

/// Where bonds are kept: --bonds FILE, else the adapter's default file.
struct BondOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The bond file (default: $XDG_STATE_HOME/swift-ble/bonds-<adapter>.json).", valueName: "FILE"))
    var bonds: String?

    func store(adapter: BluetoothAddress) -> FileBondStore { FileBondStore(path: bonds ?? FileBondStore.defaultPath(adapter: adapter)) }
}

/// How btctl pairs, by `btctl pair` and on demand by `btctl gatt` (docs/btctl.md).
struct PairingOptions: ParsableArguments {
    @OptionGroup var store: BondOptions
    @Option(help: "Our IO capability: display-only, display-yes-no, keyboard-only, no-input-no-output, keyboard-display.",
            transform: { s in
                guard let io = IOCapability(argument: s) else { throw ValidationError("unknown IO capability '\(s)'") }
                return io
            })
    var ioCapability: IOCapability = .keyboardDisplay
    @Flag(help: "Require MITM protection (an authenticated key).")
    var mitm = false
    @Flag(help: "LE legacy pairing only (no Secure Connections).")
    var legacy = false
    @Flag(help: "Refuse LE legacy pairing.")
    var secureConnectionsOnly = false
    @Flag(inversion: .prefixedNo, help: "Store the keys (bond).")
    var bond = true
    @Flag(help: "Distribute and ask for signing keys (CSRKs), for signed writes.")
    var signingKeys = false
    @Option(help: "Type this passkey when asked instead of reading it from the terminal.")
    var passkey: UInt32?
    @Flag(help: "Accept numeric comparison and Just Works without asking.")
    var yes = false
    @Option(help: "The smallest encryption key size accepted (7...16).")
    var minimumKeySize: UInt8 = 7
    @Option(help: ArgumentHelp("Keep at most N bonds in the bond file (0: none). A new peer's bond beyond them is not stored unless --replace-oldest-bond.", valueName: "N"))
    var bondLimit = BondLimit().maximum
    @Flag(help: "When the bond file holds --bond-limit bonds, remove the one saved longest ago (of a peer not connected) to store a new one.")
    var replaceOldestBond = false
    @Option(help: ArgumentHelp("Draw pairing's keys and nonces from a generator seeded with N instead of the system's, so the same run sends the same SMP PDUs and a recorded pairing replays (`btctl trace replay`). For tests only: the keys are predictable.", valueName: "N"))
    var randomSeed: UInt64?

    func validate() throws {
        guard (7...16).contains(minimumKeySize) else { throw ValidationError("--minimum-key-size must be 7...16") }
        if let passkey, passkey > 999_999 { throw ValidationError("--passkey must be 0...999999") }
        if legacy && secureConnectionsOnly { throw ValidationError("--legacy and --secure-connections-only exclude each other") }
        guard bondLimit >= 0 else { throw ValidationError("--bond-limit must be 0 or more") }
    }

    /// Refuses a `--security` level these options can never pair for: Secure
    /// Connections with `--legacy`.
    func validate(security level: SecurityLevel) throws {
        if level == .secureConnections, legacy { throw ValidationError("--security secure-connections cannot be met with --legacy") }
    }

    /// The level pairing aims for: authenticated with --mitm.
    var level: SecurityLevel { mitm ? .authenticated : .encrypted }

    /// The host's security policy from these options: pairing as configured, bonds in
    /// `store`, prompts on the terminal (or as JSON events), pairing on demand.
    func securityOptions(store: AdapterBondStore, json: Bool, answers: ConsoleAnswers? = nil) -> SecurityOptions {
        var config = PairingConfiguration(ioCapability: ioCapability, bonding: bond, mitm: mitm, secureConnections: !legacy,
                                          secureConnectionsOnly: secureConnectionsOnly, minimumKeySize: minimumKeySize,
                                          bondLimit: BondLimit(maximum: bondLimit, whenFull: replaceOldestBond ? .replaceOldest : .refuseNew))
        if signingKeys { config.keys.insert(.signingKey) }
        return SecurityOptions(pairing: config, store: store, delegate: TerminalPairingDelegate(json: json, passkey: passkey, yes: yes, answers: answers),
                               random: randomSeed.map(SecurityRandom.seeded) ?? .system)
    }
}

/// The bond file btctl uses: --bonds FILE, else the default file of the adapter, whose
/// address is known once the host has started (`bind`). Until then it holds no bonds
/// and takes none (nothing pairs before the host is started).
final class AdapterBondStore: BondStore {
    private let file: Mutex<FileBondStore?>

    init(path: String?) { file = Mutex(path.map { FileBondStore(path: $0) }) }

    /// Chooses the adapter's default file, unless --bonds named one.
    func bind(adapter: BluetoothAddress) {
        file.withLock { f in if f == nil { f = FileBondStore(path: FileBondStore.defaultPath(adapter: adapter)) } }
    }

    private func bound() throws -> FileBondStore {
        guard let f = file.withLock({ $0 }) else { throw CLIError("the bond file is not known before the controller's address") }
        return f
    }

    func bonds() throws -> [Bond] { try file.withLock { $0 }?.bonds() ?? [] }
    func save(_ bond: Bond) throws { try bound().save(bond) }
    func remove(address: BluetoothAddress, type: AddressType) throws -> Bool { try bound().remove(address: address, type: type) }
    func localIdentity() throws -> IdentityKey? { try file.withLock { $0 }?.localIdentity() }
    func saveLocalIdentity(_ identity: IdentityKey) throws { try bound().saveLocalIdentity(identity) }
    /// The file's count once it is known; 0 before (another program may share the file
    /// it will be, so the host keeps looking).
    func changesByOthers() -> UInt64? { file.withLock { $0 }?.changesByOthers() ?? 0 }
}

struct Pair: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Connect to a peer as central and pair (bonding unless --no-bond).",
        discussion: "Prompts (passkey to type, number to compare) go to the terminal, or with --json are events on stdout answered on stdin.")
    @OptionGroup var options: ControllerOptions
    @OptionGroup var peer: PeerOptions
    @OptionGroup var pairing: PairingOptions

    func run() async throws {
        let (session, writer) = try await PeerSession.open(options, peer, pairing)
        defer { writer?.close() }
        let connection = session.peripheral.connection
        let target = "\(connection.peer)\(connection.peerType == .random ? "/random" : "")"
        // While the pairing waits (for a prompt's answer, for the peer), another
        // program's change to the bond file is shown as the host notices it. What the
        // result reports itself (this pairing, the bonds it evicted) is known only
        // with the result, so the rest waits for it.
        let live = session.feed.map { feed in
            Task {
                for await _ in feed.rings {
                    feed.showOnly(where: { if case .bondsChangedElsewhere = $0 { true } else { false } })
                }
            }
        }
        func stopShowingLive() async {
            live?.cancel()
            await live?.value
        }
        do {
            let result = try await session.host.security.pair(handle: connection.handle, level: pairing.level)
            await stopShowingLive()
            // What else came meanwhile and is still queued goes first; this pairing,
            // with the bonds it evicted, is the result below.
            session.feed?.show { e in
                switch e {
                case let .paired(handle, _, _), let .pairingFailed(handle, _, _): return handle == connection.handle
                case let .bondEvicted(b): return result.bondsEvicted.contains { $0.address == b.address && $0.addressType == b.addressType }
                default: return false
                }
            }
            if options.json { emit(.object(result.event(peer: target))) } else { print(result.text(peer: target)) }
        } catch {
            await stopShowingLive()
            session.feed?.show { e in
                if case let .pairingFailed(handle, _, _) = e { return handle == connection.handle }
                return false
            }
            await session.close()
            throw CLIError("pairing with \(target) failed: \(error)")
        }
        // Our keys, the last PDUs of the pairing, reach the peer before the link ends
        // (the disconnect waits for them), and the link stays up a moment for the peer
        // to finish with them: a peer may drop a pairing whose link ends while it
        // stores the keys (Bumble cancels it).
        try? await Task.sleep(for: .milliseconds(500))
        session.feed?.show()
        await session.close()
    }
}

extension PairingResult {
    /// The `paired` event (`btctl pair`, the shell's `pair`, and the served sessions:
    /// `gatt serve`, `l2cap listen`).
    func event(peer: String) -> [(String, JSONValue)] {
        [("event", .string("paired")), ("peer", .string(peer)), ("method", .string(method.description)),
         ("level", .string(security.level.description)), ("key_size", .int(security.keySize)), ("secure_connections", .bool(security.secureConnections)),
         ("bonded", .bool(security.bonded)), ("identity", keys.peerIdentity.map { .string($0.address.description) } ?? .null)]
            + (bondNotStored.map { [("bond_not_stored", .string($0))] } ?? [])
            + (bondsEvicted.isEmpty ? [] : [("bonds_evicted", .array(bondsEvicted.map {
                .object([("address", .string($0.address.description)), ("address_type", .string($0.addressType.description))])
            }))])
    }

    func text(peer: String) -> String {
        "paired with \(peer): \(method), \(security)" + (keys.peerIdentity.map { ", identity \($0.address)" } ?? "")
            + (bondNotStored.map { "; the bond was not stored: \($0)" } ?? "")
            + (bondsEvicted.isEmpty ? "" : "; removed to make room (--bond-limit): the bond with " + bondsEvicted.map(\.address.description).joined(separator: ", "))
    }
}

/// How a served session (`gatt serve`, `l2cap listen`) reports a security event: each
/// pairing (`paired`, `pairing_failed` with the spec's reason), each link encrypted
/// (`secured`), a bond removed to make room (`bond_evicted`) and the bond file changed
/// by another program (`bonds_changed`); nil for the events it does not report.
func securityReport(_ e: SecurityEvent) -> (fields: [(String, JSONValue)], text: String)? {
    switch e {
    case let .paired(handle, peer, result):
        return (result.event(peer: "\(peer)") + [("handle", .int(Int(handle)))], result.text(peer: "\(peer)"))
    case let .pairingFailed(handle, peer, error):
        return ([("event", .string("pairing_failed")), ("handle", .int(Int(handle))), ("peer", .string("\(peer)")), ("reason", .string("\(error)"))],
                "pairing with \(peer) failed: \(error)")
    case let .bondEvicted(b):
        return ([("event", .string("bond_evicted")), ("address", .string(b.address.description)), ("address_type", .string(b.addressType.description))],
                "bond with \(b.address) removed to make room for a new one (--bond-limit)")
    case .bondsChangedElsewhere:
        return ([("event", .string("bonds_changed"))],
                "another program changed the bond file: the resolving list and each link's bond follow it")
    case let .securityChanged(handle, s) where s.encrypted:
        return ([("event", .string("secured")), ("handle", .int(Int(handle))), ("level", .string(s.level.description)),
                 ("key_size", .int(s.keySize)), ("bonded", .bool(s.bonded))],
                "link 0x\(hex4(handle)) encrypted: \(s)")
    default:
        return nil
    }
}

/// What the security manager reported on a client session (`btctl gatt`, `btctl pair`, `l2cap
/// connect`, `btctl shell`), kept until it is shown: a pairing a command's request set
/// off (`paired`, `pairing_failed`, with the method, the keys and whether the bond was
/// stored), a bond removed to make room, the bond file changed by another program. A
/// link's encryption itself is not shown from here: the command that changed it says
/// `secured` with the state it ended in.
///
/// Each event is queued on the host's loop as it is emitted, before anyone waiting for
/// the pairing resumes (`SecurityManager.addEventObserver`), so a command that goes on
/// after a pairing finds the pairing's events here and shows them before its own output;
/// `rings` says when there are events to show (the shell shows them at once, between
/// commands too). At most `limit` wait to be shown; beyond them the newest are dropped
/// and counted, and the count is shown with the next events.
final class SecurityFeed: Sendable {
    static let limit = 256
    private let queue = Mutex<(events: [SecurityEvent], dropped: Int)>(([], 0))
    /// Held while events are shown, so they come out in the order emitted whoever shows them.
    private let showing = Mutex(())
    private let display: @Sendable ([(String, JSONValue)], String) -> Void
    private let doorbell: AsyncStream<Void>.Continuation
    /// A signal (coalesced: at most one waits) each time events are queued.
    let rings: AsyncStream<Void>

    init(display: @escaping @Sendable ([(String, JSONValue)], String) -> Void) {
        self.display = display
        (rings, doorbell) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// A feed of `host`'s security events, shown by `display`.
    static func following(_ host: BluetoothHost, display: @escaping @Sendable ([(String, JSONValue)], String) -> Void) async -> SecurityFeed {
        let feed = SecurityFeed(display: display)
        await host.security.addEventObserver { [weak feed] e in feed?.queued(e) }
        return feed
    }

    /// Called on the loop: only queues (never waits for the output).
    func queued(_ e: SecurityEvent) {
        if case .securityChanged = e { return }
        guard securityReport(e) != nil else { return }
        queue.withLock { q in
            if q.events.count < Self.limit { q.events.append(e) } else { q.dropped += 1 }
        }
        doorbell.yield()
    }

    /// Whether `show()` has something to show.
    var hasQueued: Bool { queue.withLock { !$0.events.isEmpty || $0.dropped > 0 } }

    /// Shows what is queued, in order, but the events `reportedElsewhere` picks (a
    /// command that reports them itself takes them off the queue unshown).
    func show(except reportedElsewhere: (SecurityEvent) -> Bool = { _ in false }) {
        showing.withLock { _ in
            let (events, dropped) = queue.withLock { q in
                defer { q.events = []; q.dropped = 0 }
                return (q.events, q.dropped)
            }
            for e in events where !reportedElsewhere(e) { if let (fields, text) = securityReport(e) { display(fields, text) } }
            if dropped > 0 {
                display([("event", .string("dropped")), ("what", .string("security events")), ("count", .int(dropped))],
                        "\(dropped) security events not shown: more than \(Self.limit) came while the output was behind")
            }
        }
    }

    /// Shows, in order, the queued events `now` picks, and leaves the others queued
    /// for a later `show` (a command that reports some of them itself once it knows
    /// which: `pair`, with the bonds its result evicted).
    func showOnly(where now: (SecurityEvent) -> Bool) {
        showing.withLock { _ in
            let picked = queue.withLock { q in
                let picked = q.events.filter(now)
                q.events.removeAll(where: now)
                return picked
            }
            for e in picked { if let (fields, text) = securityReport(e) { display(fields, text) } }
        }
    }

    /// Ends `rings`.
    func close() { doorbell.finish() }
}

/// Prompts on the terminal: the passkey to show, the passkey to type, a number to
/// confirm. With --json each prompt is an event on stdout (naming the peer) and the
/// answer a line on stdin. `gatt serve` reads its console itself and hands prompts
/// their answers through `answers`.
struct TerminalPairingDelegate: PairingDelegate {
    let json: Bool
    let passkey: UInt32?
    let yes: Bool
    var answers: ConsoleAnswers? = nil

    func answer(_ prompt: PairingPrompt, peer: BluetoothAddress) async -> PairingAnswer {
        let who: (String, JSONValue) = ("peer", .string(peer.description))
        switch prompt {
        case let .displayPasskey(n):
            announce(json: json, [("event", .string("display_passkey")), who, ("passkey", .int(Int(n))), ("passkey_text", .string(PairingPrompt.sixDigits(n)))],
                "passkey for \(peer): \(PairingPrompt.sixDigits(n))")
            return .confirmed(true)
        case .enterPasskey:
            if let passkey { return .passkey(passkey) }
            guard let line = await ask(peer, [("event", .string("enter_passkey")), who], "enter the passkey \(peer) shows: "), let v = UInt32(line.trimmingCharacters(in: .whitespaces)), v <= 999_999 else { return .passkey(nil) }
            return .passkey(v)
        case let .confirmNumber(n):
            if yes { return .confirmed(true) }
            let line = await ask(peer, [("event", .string("confirm_number")), who, ("number", .int(Int(n))), ("number_text", .string(PairingPrompt.sixDigits(n)))],
                                 "does \(peer) show \(PairingPrompt.sixDigits(n))? [y/N] ")
            return .confirmed(Self.accepts(line))
        case .confirmPairing:
            if yes { return .confirmed(true) }
            let line = await ask(peer, [("event", .string("confirm_pairing")), who], "pair with \(peer) (Just Works, no MITM protection)? [y/N] ")
            return .confirmed(Self.accepts(line))
        }
    }

    /// Whether an answer accepts: y or yes, in any case; no answer refuses.
    static func accepts(_ line: String?) -> Bool {
        line.map { ["y", "yes"].contains($0.lowercased().trimmingCharacters(in: .whitespaces)) } ?? false
    }

    /// Shows a prompt and waits for its answer: the next console line for `gatt serve`
    /// (the prompt waits there before it is shown, so an answer sent on seeing it is
    /// its), else a line from standard input, read off the cooperative pool.
    func ask(_ peer: BluetoothAddress, _ fields: [(String, JSONValue)], _ text: String) async -> String? {
        if let answers { return await answers.next(for: peer) { announce(json: json, fields, text) } }
        announce(json: json, fields, text)
        return await withCheckedContinuation { c in
            Thread.detachNewThread { c.resume(returning: Self.lineFromStandardInput()) }
        }
    }

    /// One line from file descriptor 0, read a byte at a time so nothing after the
    /// newline is consumed, and not through stdio: `Swift.readLine` holds stdin's stdio
    /// lock while it waits, and the `fflush(nil)` a command does after each event it
    /// prints (a notification while the prompt waits) would wait for that lock. Nil at
    /// the end of input; at most 64 KiB.
    static func lineFromStandardInput() -> String? {
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while line.count < 65_536 {
            let n = Glibc.read(0, &byte, 1)
            if n < 0, errno == EINTR { continue }
            guard n == 1 else { return line.isEmpty ? nil : String(decoding: line, as: UTF8.self) }
            if byte == 0x0A { break }
            line.append(byte)
        }
        if line.last == 0x0D { line.removeLast() }
        return String(decoding: line, as: UTF8.self)
    }
}

/// Answers to pairing prompts typed on `gatt serve`'s console: while a prompt waits,
/// the next line typed answers it instead of being a command (the oldest prompt
/// first, when several centrals pair at once). A prompt waits until it is answered,
/// until its peer's pairing ends or its link does (`withdraw`), or until the console's
/// input ends (`close`); then it goes unanswered, which refuses the pairing.
final class ConsoleAnswers: Sendable {
    private struct Waiting {
        let peer: BluetoothAddress
        let continuation: CheckedContinuation<String?, Never>
    }
    private struct State {
        var waiting: [Waiting] = []
        var closed = false
    }
    private let state = Mutex(State())

    /// Waits for the line that answers `peer`'s prompt; `announce` shows the prompt once
    /// it waits.
    func next(for peer: BluetoothAddress, announce: () -> Void) async -> String? {
        await withCheckedContinuation { (c: CheckedContinuation<String?, Never>) in
            let closed = state.withLock { s in
                if !s.closed { s.waiting.append(Waiting(peer: peer, continuation: c)) }
                return s.closed
            }
            announce()
            if closed { c.resume(returning: nil) }
        }
    }

    /// Hands `line` to the oldest waiting prompt; false when none waits (the line is a command).
    func offer(_ line: String) -> Bool {
        guard let w = state.withLock({ s in s.waiting.isEmpty ? nil : s.waiting.removeFirst() }) else { return false }
        w.continuation.resume(returning: line)
        return true
    }

    /// Ends `peer`'s waiting prompts unanswered.
    func withdraw(peer: BluetoothAddress) {
        let gone = state.withLock { s in
            let gone = s.waiting.filter { $0.peer == peer }
            s.waiting.removeAll { $0.peer == peer }
            return gone
        }
        for w in gone { w.continuation.resume(returning: nil) }
    }

    /// Answers for a command whose standard input is not a console (`l2cap`: it is
    /// the channel's): every prompt that --passkey or --yes does not answer goes
    /// unanswered, which refuses the pairing.
    static func none() -> ConsoleAnswers {
        let answers = ConsoleAnswers()
        answers.close()
        return answers
    }

    /// The console's input ended: every prompt, waiting or to come, goes unanswered.
    func close() {
        let gone = state.withLock { s in
            s.closed = true
            defer { s.waiting.removeAll() }
            return s.waiting
        }
        for w in gone { w.continuation.resume(returning: nil) }
    }
}

struct Bonds: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List or remove the bonds in the adapter's bond file.", subcommands: [List.self, Remove.self], defaultSubcommand: List.self)

    /// The bond store: --bonds FILE, else the default file of the adapter -t names (its BD_ADDR is read).
    static func store(_ options: ControllerOptions, _ bonds: BondOptions) async throws -> FileBondStore {
        if let path = bonds.bonds { return FileBondStore(path: path) }
        let (controller, writer) = try await options.openController()
        defer { writer?.close() }
        let address = try await controller.send(ReadBDADDR()).address
        await controller.close()
        return bonds.store(adapter: address)
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the bonds (never the keys).")
        @OptionGroup var options: ControllerOptions
        @OptionGroup var bonds: BondOptions

        func run() async throws {
            let store = try await Bonds.store(options, bonds)
            let list: [Bond]
            do { list = try store.bonds() } catch { throw CLIError("\(error)") }
            for b in list {
                if options.json {
                    emit(.object([("event", .string("bond")), ("address", .string(b.address.description)), ("address_type", .string(b.addressType.description)),
                                  ("level", .string(b.security?.level.description ?? "none")), ("key_size", .int(b.security?.keySize ?? 0)),
                                  ("irk", .bool(b.keys.peerIdentity != nil)), ("csrk", .bool(b.keys.peerCSRK != nil)),
                                  ("link_addresses", .array(b.linkAddresses.map { .string($0.address.description) }))]))
                } else {
                    print(b.description)
                }
            }
            if !options.json && list.isEmpty { FileHandle.standardError.write(Data("no bonds in \(store.path)\n".utf8)) }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Forget the bond with a peer.")
        @OptionGroup var options: ControllerOptions
        @OptionGroup var bonds: BondOptions
        @Argument(help: "The peer: XX:XX:XX:XX:XX:XX[/random|/public] (default public).")
        var peer: DeviceAddress

        func run() async throws {
            let store = try await Bonds.store(options, bonds)
            let removed: Bool
            do { removed = try store.remove(address: peer.address, type: peer.type) } catch { throw CLIError("\(error)") }
            guard removed else { throw CLIError("no bond with \(peer.description) in \(store.path)") }
            if options.json { emit(.object([("event", .string("removed")), ("peer", .string(peer.description))])) } else { print("removed \(peer.description)") }
        }
    }
}
