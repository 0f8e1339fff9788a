// btctl shell: a central's session typed line by line, the job of bluetoothctl's
// prompt and Bumble's console: scan, connect to one peer or several, discover, read,
// write, subscribe, pair, and see values and links that end as they come. The link
// stays up between commands (each `btctl gatt` command connects and disconnects), and
// a script piped in runs the same way (docs/btctl.md, "btctl shell").

import ArgumentParser
import BLE
import Foundation
import GATT
import HCI
import Snoop

/// One shell line, parsed.
enum ShellCommand: Equatable {
    /// A peer named on a line: an address, or the name it advertises.
    enum Peer: Equatable {
        case address(DeviceAddress)
        case name(String)
    }

    case scan(seconds: Double)
    case connect(Peer)
    case disconnect(DeviceAddress?)
    case links
    case select(DeviceAddress)
    case discover
    case read(ServeCommand.Target)
    case readByUUID(BluetoothUUID)
    case write(ServeCommand.Target, [UInt8], withResponse: Bool)
    case subscribe(ServeCommand.Target, indications: Bool?)
    case unsubscribe(ServeCommand.Target)
    case pair
    case info
    case phy(Set<PHY>)
    case dataLength(Int)
    case parameters(LEConnectionParameters)
    case rssi
    case sleep(seconds: Double)
    case help
    case quit

    static let usage = """
        commands (one per line on standard input):
          scan [SECONDS]             scan (default 5 s, at most 3600) and list each device heard
          connect ADDRESS|NAME       connect to ADDRESS[/random], or to the first device advertising
                                     NAME; the link becomes the current one
          disconnect [ADDRESS]       end the current link (or ADDRESS's)
          links                      list the links; * marks the current one
          select ADDRESS             make ADDRESS's link the current one
          discover                   list the current peer's services, includes, characteristics
                                     and descriptors
          read ATTR                  read (long values included)
          read-uuid UUID             read every value of that type without discovery (Read By Type)
          write ATTR VALUE           write, with a response (prepared writes when it is long)
          write-cmd ATTR VALUE       Write Without Response
          subscribe ATTR [indicate]  subscribe; each value is shown as it comes
          unsubscribe ATTR           end a subscription
          pair                       pair with the current peer (bonding unless --no-bond)
          info                       the current link: parameters, PHY, data length, ATT_MTU, security
          phy 1m|2m|coded...         ask for these PHYs both ways (LE Set PHY); says what the link uses after
          data-length OCTETS         send PDUs of up to OCTETS, 27 to 251 (LE Set Data Length)
          parameters MIN:MAX:LATENCY:TIMEOUT
                                     ask for a connection update (intervals in 1.25 ms units,
                                     timeout in 10 ms units), as --connection-parameters takes them
          rssi                       the current link's RSSI (Read RSSI)
          sleep SECONDS              wait (at most 3600 s), values and link ends still shown: a
                                     script's pause before its next command or its end
          help                       this text
          quit                       disconnect every link and stop (as at the end of input)
        ATTR is a characteristic UUID (2A19, or 128-bit; the first one with it) or a handle
        (0x0012: read and write take any attribute's); VALUE is hex bytes (64, 01ff, 01:ff
        or 01 ff) or "quoted text" (sent as UTF-8). A request the peer refuses for the
        link's security encrypts from the bond or pairs, and is sent again. While pairing
        asks something (a passkey to type, a number to confirm), the next line is the
        answer: the six digits, or y/yes to accept.
        """

    /// Parses one line; nil for a blank line or a `#` comment.
    static func parse(_ line: String) throws(CLIError) -> ShellCommand? {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        if trimmed.isEmpty || trimmed.hasPrefix("#") { return nil }
        let words = trimmed.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true).map(String.init)
        let verb = words[0].lowercased()
        func argument(_ what: String) throws(CLIError) -> String {
            guard words.count >= 2 else { throw CLIError("\(verb) needs \(what)") }
            return words.count > 2 ? words[1] + " " + words[2] : words[1]
        }
        func only(_ count: Int) throws(CLIError) {
            guard words.count <= count else { throw CLIError("\(verb) takes \(count == 1 ? "nothing" : "one word") after it") }
        }
        func address(_ word: String) throws(CLIError) -> DeviceAddress {
            guard let a = DeviceAddress(argument: word) else { throw CLIError("'\(word)' is not an address (XX:XX:XX:XX:XX:XX[/random|/public])") }
            return a
        }
        switch verb {
        case "help", "?": try only(1); return .help
        case "quit", "exit": try only(1); return .quit
        case "links": try only(1); return .links
        case "discover": try only(1); return .discover
        case "pair": try only(1); return .pair
        case "info": try only(1); return .info
        case "rssi": try only(1); return .rssi
        case "sleep":
            try only(2)
            let w = try argument("seconds")
            guard let t = Double(w), t.isFinite, t > 0, t <= 3600 else { throw CLIError("sleep takes seconds, more than 0 and at most 3600, not '\(w)'") }
            return .sleep(seconds: t)
        case "phy":
            guard words.count >= 2 else { throw CLIError("phy needs one or more of 1m, 2m and coded") }
            var phys: Set<PHY> = []
            for w in words.dropFirst().joined(separator: " ").split(separator: " ") {
                do { phys.insert(try parsePHY(String(w))) } catch { throw CLIError("bad PHY '\(w)': 1m, 2m or coded") }
            }
            return .phy(phys)
        case "data-length":
            try only(2)
            let w = try argument("the octets to send per PDU, 27 to 251")
            guard let n = Int(w), (27...251).contains(n) else { throw CLIError("data-length takes 27 to 251 octets, not '\(w)'") }
            return .dataLength(n)
        case "parameters":
            try only(2)
            let text = try argument("MIN:MAX:LATENCY:TIMEOUT")
            do { return .parameters(try parseConnectionParameters(text)) } catch {
                throw CLIError("\(error)".replacingOccurrences(of: "--connection-parameters", with: "parameters"))
            }
        case "scan":
            try only(2)
            guard words.count == 2 else { return .scan(seconds: 5) }
            guard let s = Double(words[1]), s.isFinite, s > 0, s <= 3600 else { throw CLIError("scan takes seconds, more than 0 and at most 3600, not '\(words[1])'") }
            return .scan(seconds: s)
        case "connect":
            let peer = try argument("an address or the name a device advertises")
            if let a = DeviceAddress(argument: peer) { return .connect(.address(a)) }
            return .connect(.name(peer))
        case "disconnect":
            try only(2)
            return .disconnect(try words.count == 2 ? address(words[1]) : nil)
        case "select":
            try only(2)
            return .select(try address(argument("an address (see links)")))
        case "read":
            try only(2)
            return .read(try Console.target(argument("an attribute: a UUID such as 2A19, or a handle such as 0x0012")))
        case "read-uuid":
            try only(2)
            let w = try argument("a characteristic UUID, such as 2A19")
            guard let u = BluetoothUUID(w) else { throw CLIError("'\(w)' is not a UUID (2A19, or 128-bit)") }
            return .readByUUID(u)
        case "unsubscribe":
            try only(2)
            return .unsubscribe(try Console.target(argument("a characteristic: a UUID such as 2A19, or a value handle such as 0x0012")))
        case "subscribe":
            guard words.count >= 2 else { throw CLIError("subscribe needs a characteristic: a UUID such as 2A19, or a value handle such as 0x0012") }
            let target = try Console.target(words[1])
            guard words.count == 3 else { return .subscribe(target, indications: nil) }
            switch words[2].lowercased() {
            case "indicate", "indications": return .subscribe(target, indications: true)
            case "notify", "notifications": return .subscribe(target, indications: false)
            default: throw CLIError("subscribe takes 'indicate' or 'notify' after the characteristic, not '\(words[2])'")
            }
        case "write", "write-cmd":
            guard words.count == 3 else { throw CLIError("\(verb) needs an attribute and a value: hex bytes or \"quoted text\"") }
            return .write(try Console.target(words[1]), try Console.value(words[2]), withResponse: verb == "write")
        default:
            throw CLIError("unknown command '\(words[0])' (type 'help')")
        }
    }
}

struct Shell: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "A central's session, one command per line: scan, connect, discover, read, write, subscribe, pair.",
        discussion: "The links stay up between commands; values from subscriptions and links that end are shown as they come. "
            + "Reads standard input (a terminal, or a script piped in) until 'quit' or its end, then disconnects. "
            + "Exit status 1 when a command failed.\n\n" + ShellCommand.usage)
    @OptionGroup var options: ControllerOptions
    @OptionGroup(title: "Pairing (pair, and on demand)") var pairing: PairingOptions
    @Option(help: ArgumentHelp("The ATT_MTU to offer in Exchange MTU on each link, 23 to 517.", valueName: "OCTETS"))
    var attMTU: Int = 517
    @Option(help: ArgumentHelp("Seconds to find and connect to a peer ('connect').", valueName: "SECONDS"))
    var connectTimeout: Double = 15

    func validate() throws {
        try validateATTMTU(attMTU)
        guard connectTimeout > 0, connectTimeout.isFinite else { throw ValidationError("--connect-timeout must be positive") }
    }

    func run() async throws {
        // Pairing prompts are answered on the console: the next line typed.
        let answers = ConsoleAnswers()
        let store = AdapterBondStore(path: pairing.store.bonds)
        let (host, writer) = try await options.openHost(security: pairing.securityOptions(store: store, json: options.json, answers: answers),
                                                        attMTU: UInt16(attMTU))
        defer { writer?.close() }
        let session: ShellSession
        do {
            let address = try await host.start().address
            store.bind(adapter: address)
            let json = options.json
            let feed = await SecurityFeed.following(host) { consoleReport(json: json, $0, $1) }
            session = ShellSession(host: host, json: json, connectTimeout: cliDuration(seconds: connectTimeout), pairingLevel: pairing.level, feed: feed)
            session.report([("event", .string("ready")), ("address", .string(address.description))],
                           "btctl shell on \(address); type 'help' for commands")
        } catch {
            await host.close()
            throw CLIError("cannot start: \(error)")
        }
        let links = host.connectionEvents()
        let follower = Task {
            for await e in links {
                if case let .disconnected(c, reason) = e { await session.linkEnded(c, reason: reason) }
            }
        }
        // Pairings the peer starts (a Security Request), bonds evicted, the bond file
        // changed elsewhere: shown as they come, between commands too.
        let securityShower = Task { for await _ in session.feed.rings { session.feed.show() } }
        if isatty(0) != 0, !options.json { FileHandle.standardError.write(Data("> ".utf8)) }
        let lost = FirstReason()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                _ = await Console.run(answers: answers) { line in
                    let quit = await session.run(line)
                    if !quit, isatty(0) != 0, !session.json { FileHandle.standardError.write(Data("> ".utf8)) }
                    return quit
                }
            }
            // A signal, or the controller going away (the host cannot be used any more:
            // the shell ends, exit status 1).
            group.addTask { if let why = await Interrupt.sleep(for: nil, orUntilTheTransportOf: host) { lost.set(why) } }
            await group.next()
            group.cancelAll()
        }
        answers.close()
        // Every link ends: `quit` and the end of input write the subscriptions off first;
        // on a signal the host's own shutdown disconnects them, and its end comes first
        // so that the links it ends are reported (`linkEnded`) before the host closes.
        if Interrupt.requested { await Interrupt.finishCleanups() } else { await session.close() }
        await host.close()
        await waitFor([follower], within: .seconds(2))
        follower.cancel()
        session.feed.close()
        await securityShower.value
        if let e = writer?.error { throw CLIError("the btsnoop recording failed: \(e)") }
        if let why = lost.reason, !Interrupt.requested { throw CLIError(ControllerWentAway(why: why).description) }
        let failed = await session.failed
        if failed > 0, !Interrupt.requested { throw ExitCode(1) }
    }
}

/// The shell's links and subscriptions. Commands run one at a time (the console
/// queues them); links that end and subscriptions' values are reported as they come.
actor ShellSession {
    nonisolated let host: BluetoothHost
    nonisolated let json: Bool
    /// The host's security events, shown by whoever comes first: a command that paired
    /// (before its own output), or the shell's shower between commands.
    nonisolated let feed: SecurityFeed
    let connectTimeout: Duration
    let pairingLevel: SecurityLevel
    /// The links we made, in the order made.
    private var links: [RemotePeripheral] = []
    private var currentID: UInt64?
    /// Links a `disconnect` ends: reported by it, not by `linkEnded`.
    private var leaving: Set<UInt64> = []
    /// Each subscription's printer, by link and value handle.
    private var subscriptions: [SubscriptionKey: Task<Void, Never>] = [:]
    /// Commands that failed (the exit status).
    private(set) var failed = 0

    struct SubscriptionKey: Hashable {
        var link: UInt64
        var handle: UInt16
    }

    init(host: BluetoothHost, json: Bool, connectTimeout: Duration, pairingLevel: SecurityLevel, feed: SecurityFeed) {
        self.host = host
        self.json = json
        self.feed = feed
        self.connectTimeout = connectTimeout
        self.pairingLevel = pairingLevel
    }

    nonisolated func report(_ o: [(String, JSONValue)], _ text: String) { consoleReport(json: json, o, text) }

    /// Runs one line; true for `quit`. A command that fails is an `error` event.
    func run(_ line: String) async -> Bool {
        do {
            guard let command = try ShellCommand.parse(line) else { return false }
            if command == .quit { return true }
            try await run(command)
        } catch {
            failed += 1
            report([("event", .string("error")), ("command", .string(line)), ("message", .string("\(error)"))], "btctl: \(error)")
        }
        return false
    }

    private func run(_ command: ShellCommand) async throws {
        switch command {
        case .quit: break
        case .help: FileHandle.standardError.write(Data((ShellCommand.usage + "\n").utf8))
        case let .scan(seconds): try await scan(seconds: seconds)
        case let .connect(peer): try await connect(peer)
        case let .disconnect(address): try await disconnect(try address.map(link(to:)) ?? current())
        case .links:
            if links.isEmpty, !json { print("no links") }
            for p in links {
                let c = p.connection, mark = c.id == currentID
                report([("event", .string("link")), ("handle", .int(Int(c.handle))), ("peer", .string(Self.peer(c))), ("current", .bool(mark))],
                       "\(mark ? "*" : " ") \(Self.peer(c))  handle 0x\(hex4(c.handle))")
            }
        case let .select(address):
            let p = try link(to: address)
            currentID = p.connection.id
            report([("event", .string("selected")), ("handle", .int(Int(p.connection.handle))), ("peer", .string(Self.peer(p.connection)))],
                   "current link: \(Self.peer(p.connection))")
        case .discover:
            let s = try session()
            let primary = try await s.discoverAll()
            listServices(primary, includes: try await s.includes(), json: json)
        case let .read(target):
            let s = try session()
            let (handle, uuid) = try await attribute(target, in: s)
            let v = try await s.reportingSecurity { try await s.peripheral.read(handle: handle) }
            report([("event", .string("value"))] + valueJSON(handle, v, uuid: uuid), valueLine(handle, v, uuid: uuid))
        case let .readByUUID(uuid):
            let s = try session()
            let found = try await s.reportingSecurity { try await s.peripheral.read(uuid: uuid) }
            if found.isEmpty, !json { print("no \(named(uuid)) value") }
            for (handle, v) in found {
                report([("event", .string("value"))] + valueJSON(handle, v, uuid: uuid), valueLine(handle, v, uuid: uuid))
            }
        case let .write(target, value, withResponse):
            let s = try session()
            let (handle, _) = try await attribute(target, in: s)
            try await s.reportingSecurity { try await s.peripheral.write(value, handle: handle, withResponse: withResponse) }
            report([("event", .string("written")), ("handle", .int(Int(handle))), ("length", .int(value.count))],
                   "wrote \(value.count) bytes to 0x\(hex4(handle))\(withResponse ? "" : " (without response)")")
        case let .subscribe(target, indications): try await subscribe(target, indications: indications)
        case let .unsubscribe(target):
            let s = try session()
            let c = try await characteristic(target, in: s)
            let key = SubscriptionKey(link: s.peripheral.connection.id, handle: c.valueHandle)
            guard let printer = subscriptions[key] else { throw CLIError("not subscribed to \(named(c.uuid))") }
            try await s.reportingSecurity { try await s.peripheral.unsubscribe(from: c) }
            // The values end with the subscription: what came before is shown first.
            await printer.value
            subscriptions[key] = nil
            report([("event", .string("unsubscribed")), ("handle", .int(Int(c.valueHandle))), ("uuid", .string(c.uuid.description))] + nameField(c.uuid),
                   "unsubscribed from \(named(c.uuid))")
        case .pair:
            // The pairing's `paired` (or `pairing_failed`) was queued before it returned,
            // and is shown here if the shower has not shown it yet.
            let p = try current()
            defer { feed.show() }
            _ = try await host.security.pair(handle: p.connection.handle, level: pairingLevel)
        case let .phy(phys):
            try await session().updatePHY(phys, report: report)
        case let .dataLength(octets):
            try await session().updateDataLength(octets, report: report)
        case let .parameters(wanted):
            let p = try current(), handle: (String, JSONValue) = ("handle", .int(Int(p.connection.handle)))
            // nil: the update ended with the parameters unchanged (the peer refused).
            let got = try await p.updateParameters(intervalMin: wanted.connectionIntervalMin, intervalMax: wanted.connectionIntervalMax,
                                                   latency: wanted.maxLatency, supervisionTimeout: wanted.supervisionTimeout)
            let now = try await p.parameters()
            report([("event", .string("parameters")), handle, ("interval", .int(Int(now.interval))), ("latency", .int(Int(now.latency))),
                    ("supervision_timeout", .int(Int(now.supervisionTimeout))), ("updated", .bool(got != nil))],
                   got != nil ? "connection \(now)" : "the connection stays: \(now)")
        case let .sleep(seconds):
            await Interrupt.sleep(for: cliDuration(seconds: seconds))
        case .rssi:
            let p = try current()
            let rssi = try await p.readRSSI()
            report([("event", .string("rssi")), ("handle", .int(Int(p.connection.handle))), ("rssi", .int(Int(rssi)))], "RSSI \(rssi) dBm")
        case .info:
            let p = try current(), c = p.connection
            let parameters = try await p.parameters(), length = try await p.dataLength(), mtu = await p.mtu, security = await p.security
            // A controller with LE 1M only has no LE Read PHY.
            let phy = try? await p.phy()
            var o: [(String, JSONValue)] = [("event", .string("info")), ("handle", .int(Int(c.handle))), ("peer", .string(Self.peer(c))),
                                            ("interval", .int(Int(parameters.interval))), ("latency", .int(Int(parameters.latency))),
                                            ("supervision_timeout", .int(Int(parameters.supervisionTimeout))),
                                            ("tx_octets", .int(length.maxTxOctets)), ("rx_octets", .int(length.maxRxOctets)), ("mtu", .int(mtu)),
                                            ("level", .string(security.level.description)), ("encrypted", .bool(security.encrypted)),
                                            ("bonded", .bool(security.bonded))]
            if let phy { o += [("phy_tx", .string(phy.tx.description)), ("phy_rx", .string(phy.rx.description))] }
            report(o, ["link to \(Self.peer(c)) (handle 0x\(hex4(c.handle)))",
                       "  connection  \(parameters)",
                       "  PHY         \(phy?.description ?? "LE 1M (the controller has no other)")",
                       "  data length \(length.maxTxOctets) octets out, \(length.maxRxOctets) in",
                       "  ATT_MTU     \(mtu)",
                       "  security    \(security)"].joined(separator: "\n"))
        }
    }

    /// Scans for `seconds` and lists each device once (its last report), in the order first heard.
    private func scan(seconds: Double) async throws {
        let results = try await host.central.scan(for: cliDuration(seconds: seconds))
        var order: [DeviceAddress] = [], last: [DeviceAddress: ScanResult] = [:]
        for r in results {
            let a = DeviceAddress(r.address, type: r.addressType)
            if last.updateValue(r, forKey: a) == nil { order.append(a) }
        }
        for a in order {
            guard let r = last[a] else { continue }
            report([("event", .string("device")), ("address", .string(a.description)), ("rssi", .int(Int(r.rssi)))] + (r.name.map { [("name", .string($0))] } ?? []),
                   "\(a)  \(r.rssi) dBm\(r.name.map { "  " + $0 } ?? "")")
        }
        if !json { print("\(order.count) device\(order.count == 1 ? "" : "s") heard in \(secondsText(seconds))") }
    }

    private func connect(_ peer: ShellCommand.Peer) async throws {
        let p: RemotePeripheral
        switch peer {
        case let .address(a):
            p = try await host.central.connect(to: a.address, type: a.type, within: connectTimeout)
        case let .name(name):
            guard let found = try await host.central.first(matching: ScanFilter(names: [name]), within: connectTimeout) else {
                throw CLIError("no device named '\(name)' advertised within \(connectTimeout)")
            }
            p = try await host.central.connect(to: found, within: connectTimeout)
        }
        let c = p.connection
        if !links.contains(where: { $0.connection.id == c.id }) { links.append(p) }
        currentID = c.id
        report([("event", .string("connected")), ("handle", .int(Int(c.handle))), ("peer", .string(Self.peer(c)))],
               "connected to \(Self.peer(c)) (handle 0x\(hex4(c.handle)))")
    }

    /// Ends link `p`: its subscriptions are written off the peer's CCCDs first (the
    /// printers let go of their values, which queues the writes; the disconnection
    /// waits for what was queued), as `gatt subscribe` leaves a peer.
    private func disconnect(_ p: RemotePeripheral) async throws {
        let c = p.connection
        leaving.insert(c.id)
        defer { leaving.remove(c.id) }
        for (key, printer) in subscriptions where key.link == c.id {
            printer.cancel()
            await printer.value
            subscriptions[key] = nil
        }
        let reason = try await p.disconnect()
        forget(c)
        report([("event", .string("disconnected")), ("handle", .int(Int(c.handle))), ("peer", .string(Self.peer(c))), ("reason", .string(reason.description))],
               "disconnected from \(Self.peer(c)): \(reason)")
    }

    private func subscribe(_ target: ServeCommand.Target, indications: Bool?) async throws {
        let s = try session()
        let c = try await characteristic(target, in: s)
        let values = try await s.reportingSecurity { try await s.peripheral.subscribe(to: c, indications: indications) }
        let indicated = indications ?? !c.properties.contains(.notify)
        let key = SubscriptionKey(link: s.peripheral.connection.id, handle: c.valueHandle)
        report([("event", .string("subscribed")), ("handle", .int(Int(c.valueHandle))), ("uuid", .string(c.uuid.description)), ("indications", .bool(indicated))]
                   + nameField(c.uuid),
               "subscribed to \(named(c.uuid)) (value 0x\(hex4(c.valueHandle))) for \(indicated ? "indications" : "notifications")")
        // Its values, buffered meanwhile, are shown after the line that says it is on.
        // A new subscription to the same characteristic ended the old one's values.
        // The subscription keeps its newest 256 values while the output is behind; any
        // older ones lost are counted in a `dropped` event, before the next value shown.
        subscriptions[key] = Task { [weak self] in
            let event = indicated ? "indication" : "notification"
            var lost = 0
            func tellDrops() {
                let now = values.dropped.count
                guard now > lost else { return }
                lost = now
                self?.report([("event", .string("dropped")), ("handle", .int(Int(c.valueHandle))), ("count", .int(now))],
                             "\(now) \(event)s of 0x\(hex4(c.valueHandle)) dropped so far: the output fell behind")
            }
            do {
                for try await v in values {
                    tellDrops()
                    self?.report([("event", .string(event))] + valueJSON(c.valueHandle, v, uuid: c.uuid), "\(event) " + valueLine(c.valueHandle, v, uuid: c.uuid))
                }
            } catch {
                // The link ended: `linkEnded` says so.
            }
            tellDrops()
        }
    }

    /// A link ended (the peer, the controller, a supervision timeout): reported unless
    /// a `disconnect` ended it.
    func linkEnded(_ c: Connection, reason: HCIStatus) {
        guard !leaving.contains(c.id), links.contains(where: { $0.connection.id == c.id }) else { return }
        forget(c)
        report([("event", .string("disconnected")), ("handle", .int(Int(c.handle))), ("peer", .string(Self.peer(c))), ("reason", .string(reason.description))],
               "link to \(Self.peer(c)) ended: \(reason)")
    }

    /// Ends every link (`quit`, end of input), each subscription written off first.
    func close() async {
        for p in links { try? await disconnect(p) }
    }

    private func forget(_ c: Connection) {
        links.removeAll { $0.connection.id == c.id }
        for key in subscriptions.keys where key.link == c.id { subscriptions[key] = nil }
        if currentID == c.id { currentID = links.last?.connection.id }
    }

    private func current() throws -> RemotePeripheral {
        guard let p = links.first(where: { $0.connection.id == currentID }) else {
            throw CLIError(links.isEmpty ? "no link: connect ADDRESS|NAME first" : "no current link: select ADDRESS")
        }
        return p
    }

    private func link(to a: DeviceAddress) throws -> RemotePeripheral {
        guard let p = links.first(where: { $0.connection.peer == a.address && $0.connection.peerType.rawValue & 1 == a.type.rawValue & 1 }) else {
            throw CLIError("no link to \(a) (see links)")
        }
        return p
    }

    /// The current link as the `gatt` commands use one (security reported, discovery cached).
    private func session() throws -> PeerSession { PeerSession(host: host, peripheral: try current(), json: json, feed: feed) }

    /// A handle as given (the characteristic it is the value of, if discovery found it,
    /// formats the value); a UUID's characteristic's value handle.
    private func attribute(_ target: ServeCommand.Target, in s: PeerSession) async throws -> (UInt16, BluetoothUUID?) {
        switch target {
        case let .handle(h): return (h, nil)
        case .uuid:
            let c = try await characteristic(target, in: s)
            return (c.valueHandle, c.uuid)
        }
    }

    /// The characteristic `target` names: the first with the UUID, or the one whose value handle it is.
    private func characteristic(_ target: ServeCommand.Target, in s: PeerSession) async throws -> RemoteCharacteristic {
        for service in try await s.discoverAll() {
            for c in service.characteristics {
                switch target {
                case let .uuid(u) where c.uuid == u: return c
                case let .handle(h) where c.valueHandle == h: return c
                default: continue
                }
            }
        }
        throw CLIError("the peer has no characteristic \(target)")
    }

    static func peer(_ c: Connection) -> String { DeviceAddress(c.peer, type: c.peerType).description }
}
