// btctl gatt serve FILE.json: serve and advertise a GATT database described in a
// JSON file (schema and example: docs/gatt-serve.md), printing what clients do.

import ArgumentParser
import BLE
import Foundation
import GAP
import GATT
import HCI
import Snoop
import Synchronization

/// The database file, read from a strict JSON document: every error names the JSON
/// path and the line and column of the value it is about.
struct DatabaseFile {
    var name: String?
    var services: [Service]

    struct Service {
        var node: JSONNode
        var uuid: BluetoothUUID
        var primary: Bool
        /// Services listed before this one that it includes, by index into `services`.
        var includes: [Int]
        var characteristics: [GATTCharacteristic]
    }

    static let propertyNames: [String: CharacteristicProperties] = [
        "broadcast": .broadcast, "read": .read, "write-without-response": .writeWithoutResponse, "write": .write,
        "notify": .notify, "indicate": .indicate, "signed-write": .authenticatedSignedWrites, "extended": .extendedProperties,
    ]
    static let permissionNames: [String: AttributePermissions] = [
        "read": .read, "write": .write, "read-encrypted": .readEncrypted, "write-encrypted": .writeEncrypted,
        "read-authenticated": .readAuthenticated, "write-authenticated": .writeAuthenticated,
        "read-authorized": .readAuthorized, "write-authorized": .writeAuthorized,
    ]

    /// Parses and checks the whole file: JSON syntax (strict: no trailing commas, no
    /// repeated keys), then the schema: unknown keys (a typo such as "servces" would
    /// otherwise be ignored), types, both `value` and `text` on one attribute, a
    /// descriptor listed twice, a Client Characteristic Configuration descriptor (the
    /// server adds it to every notify/indicate characteristic), values longer than the
    /// characteristic allows.
    init(parsing bytes: [UInt8]) throws {
        let root = try JSONObjectReader(try JSONDocument.parse(bytes), path: "")
        try root.allowOnly(["name", "services"])
        name = try root.string("name")
        guard let list = try root.array("services") else { throw JSONSchemaError(root.node, "", "missing 'services'") }
        services = []
        for (i, node) in list.enumerated() {
            let s = try JSONObjectReader(node, path: "services[\(i)]")
            try s.allowOnly(["uuid", "primary", "includes", "characteristics"])
            var chars: [GATTCharacteristic] = []
            for (j, c) in (try s.array("characteristics") ?? []).enumerated() {
                chars.append(try Self.characteristic(try JSONObjectReader(c, path: "\(s.path).characteristics[\(j)]")))
            }
            // An include names a service listed earlier (the nearest one with that
            // UUID): the database holds it, with its handles, by then.
            var includes: [Int] = []
            for (text, node) in try s.strings("includes") ?? [] {
                guard let u = BluetoothUUID(text) else { throw JSONSchemaError(node, s.path("includes"), "'\(text)' is not a UUID") }
                guard let k = services.lastIndex(where: { $0.uuid == u }) else {
                    throw JSONSchemaError(node, s.path("includes"), "no service \(u) is listed before this one")
                }
                guard !includes.contains(k) else { throw JSONSchemaError(node, s.path("includes"), "\(u) is included twice") }
                includes.append(k)
            }
            services.append(Service(node: node, uuid: try Self.uuid(s), primary: try s.bool("primary") ?? true, includes: includes, characteristics: chars))
        }
    }

    private static func uuid(_ o: JSONObjectReader) throws(JSONSchemaError) -> BluetoothUUID {
        let text = try o.requiredString("uuid")
        guard let u = BluetoothUUID(text) else { throw JSONSchemaError(o.member("uuid") ?? o.node, o.path("uuid"), "'\(text)' is not a UUID (use 180F or a 128-bit UUID)") }
        return u
    }

    /// `value` (hex) or `text` (UTF-8), not both; empty when neither.
    private static func value(_ o: JSONObjectReader, maximumLength: Int) throws(JSONSchemaError) -> [UInt8] {
        let hex = try o.string("value"), text = try o.string("text")
        if hex != nil, text != nil { throw JSONSchemaError(o.node, o.path, "give 'value' (hex) or 'text', not both") }
        let bytes: [UInt8]
        if let text {
            bytes = Array(text.utf8)
        } else if let hex {
            guard let b = [UInt8](hex: hex) else { throw JSONSchemaError(o.member("value") ?? o.node, o.path("value"), "'\(hex)' is not hex bytes") }
            bytes = b
        } else {
            bytes = []
        }
        if bytes.count > maximumLength {
            throw JSONSchemaError(o.member("value") ?? o.member("text") ?? o.node, o.path, "the value is \(bytes.count) bytes, longer than its maximum of \(maximumLength)")
        }
        return bytes
    }

    private static func permissions(_ o: JSONObjectReader) throws(JSONSchemaError) -> AttributePermissions? {
        guard let names = try o.strings("permissions") else { return nil }
        var p: AttributePermissions = []
        for (n, node) in names {
            guard let v = permissionNames[n] else {
                throw JSONSchemaError(node, o.path("permissions"), "unknown '\(n)' (known: \(permissionNames.keys.sorted().joined(separator: ", ")))")
            }
            p.insert(v)
        }
        return p
    }

    private static func characteristic(_ c: JSONObjectReader) throws(JSONSchemaError) -> GATTCharacteristic {
        try c.allowOnly(["uuid", "properties", "value", "text", "permissions", "maxLength", "descriptors"])
        let uuid = try uuid(c)
        guard let names = try c.strings("properties") else { throw JSONSchemaError(c.node, c.path, "missing 'properties'") }
        var props: CharacteristicProperties = []
        for (n, node) in names {
            guard let p = propertyNames[n] else {
                throw JSONSchemaError(node, c.path("properties"), "unknown '\(n)' (known: \(propertyNames.keys.sorted().joined(separator: ", ")))")
            }
            props.insert(p)
        }
        let maxLength = try c.int("maxLength", in: 0...512) ?? 512
        var descriptors: [GATTDescriptor] = []
        var seen: Set<BluetoothUUID> = []
        for (k, node) in (try c.array("descriptors") ?? []).enumerated() {
            let d = try JSONObjectReader(node, path: "\(c.path).descriptors[\(k)]")
            try d.allowOnly(["uuid", "value", "text", "permissions"])
            let u = try Self.uuid(d)
            if u == GATTType.clientCharacteristicConfiguration {
                throw JSONSchemaError(node, d.path, "2902 (Client Characteristic Configuration) is added by the server to every notify/indicate characteristic; remove it")
            }
            guard seen.insert(u).inserted else { throw JSONSchemaError(node, d.path, "descriptor \(u) is listed twice") }
            descriptors.append(GATTDescriptor(uuid: u, permissions: try permissions(d) ?? .read, value: try value(d, maximumLength: 512)))
        }
        return GATTCharacteristic(uuid: uuid, properties: props, permissions: try permissions(c), value: try value(c, maximumLength: maxLength),
                                  maximumLength: maxLength, descriptors: descriptors)
    }

    /// Builds the database: the mandatory GAP and GATT services first (as the host
    /// makes them: with Server Supported Features for EATT, with the preferred
    /// connection parameters when given), then the file's.
    func database(enhancedATT: Bool = false, preferredConnectionParameters: PreferredConnectionParameters? = nil) throws -> AttributeDatabase {
        var db = AttributeDatabase()
        _ = try db.addMandatoryServices(deviceName: name ?? "btctl", serverFeatures: enhancedATT ? ServerSupportedFeatures.eatt : nil,
                                        preferredConnectionParameters: preferredConnectionParameters)
        var starts: [UInt16] = []
        for (i, s) in services.enumerated() {
            do {
                starts.append(try db.add(GATTService(uuid: s.uuid, isPrimary: s.primary, includes: s.includes.map { starts[$0] },
                                                     characteristics: s.characteristics)).start)
            } catch {
                throw JSONSchemaError(s.node, "services[\(i)]", "\(error)")
            }
        }
        if let hash = db.attributes.first(where: { $0.type == GATTCharacteristicType.databaseHash })?.handle { try db.refreshDatabaseHash(at: hash) }
        return db
    }

    /// The primary services' UUIDs, in file order, for advertising.
    var primaryServiceUUIDs: [BluetoothUUID] { services.filter(\.primary).map(\.uuid) }
}

/// A line typed on `gatt serve`'s standard input (docs/gatt-serve.md "Commands").
enum ServeCommand: Equatable {
    /// A characteristic: its value handle (`0x0012`) or its UUID (the first with it).
    enum Target: Equatable, CustomStringConvertible {
        case handle(UInt16)
        case uuid(BluetoothUUID)
        var description: String {
            switch self {
            case let .handle(h): return "0x" + hex4(h)
            case let .uuid(u): return named(u)
            }
        }
    }
    case set(Target, [UInt8])
    case notify(Target, [UInt8]?)
    case indicate(Target, [UInt8]?)
    case help
    case quit

    static let usage = """
        commands (one per line on standard input):
          set CHAR VALUE         store a value (what reads return); nobody is told
          notify CHAR [VALUE]    store VALUE if given, then notify the subscribed centrals
          indicate CHAR [VALUE]  store VALUE if given, then indicate and wait for confirmations
          help                   this text
          quit                   stop serving (as at the end of --duration)
        CHAR is a characteristic UUID (2A19, or 128-bit) or its value handle (0x0012);
        VALUE is hex bytes (64, 01ff, 01:ff or 01 ff) or "quoted text" (sent as UTF-8).
        While a central's pairing asks something (a passkey to type, a number to confirm),
        the next line is the answer: the six digits, or y/yes to accept.
        """

    /// Parses one line; nil for a blank line or a `#` comment.
    static func parse(_ line: String) throws(CLIError) -> ServeCommand? {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        if trimmed.isEmpty || trimmed.hasPrefix("#") { return nil }
        let words = trimmed.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true).map(String.init)
        let verb = words[0].lowercased()
        switch verb {
        case "help", "?": return .help
        case "quit", "exit": return .quit
        case "set", "notify", "indicate":
            guard words.count >= 2 else { throw CLIError("\(verb) needs a characteristic (a UUID such as 2A19, or a value handle such as 0x0012)") }
            let target = try Console.target(words[1])
            let value = try words.count > 2 ? Console.value(words[2]) : nil
            switch verb {
            case "set":
                guard let value else { throw CLIError("set needs a value: hex bytes or \"quoted text\"") }
                return .set(target, value)
            case "notify": return .notify(target, value)
            default: return .indicate(target, value)
            }
        default:
            throw CLIError("unknown command '\(words[0])' (set, notify, indicate, help, quit)")
        }
    }

    /// The characteristic value attribute `target` names in `db`, checked for the
    /// property the command needs and the value's length.
    static func resolve(_ target: Target, in db: AttributeDatabase, value: [UInt8]?, needs property: CharacteristicProperties?) throws(CLIError) -> Attribute {
        let found = db.attributes.first { a in
            guard case .characteristicValue = a.role else { return false }
            switch target {
            case let .handle(h): return a.handle == h
            case let .uuid(u): return a.type == u
            }
        }
        guard let a = found, case let .characteristicValue(properties) = a.role else {
            throw CLIError("no characteristic \(target) in the database")
        }
        if let property, !properties.contains(property) {
            throw CLIError("\(named(a.type)) at 0x\(hex4(a.handle)) cannot \(property == .notify ? "notify" : "indicate") (properties: \(properties.names.joined(separator: ", ")))")
        }
        if let value, value.count > a.maximumLength {
            throw CLIError("the value is \(value.count) bytes; \(named(a.type)) holds at most \(a.maximumLength)")
        }
        return a
    }
}

extension Gatt {
    struct Serve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Serve and advertise a GATT database described in a JSON file.",
            discussion: "Advertises connectably with the primary services' UUIDs and the name (in the scan response when the advertising data is full). "
                + "Reads commands from standard input: set, notify and indicate a characteristic (docs/gatt-serve.md).\n\n" + ServeCommand.usage)
        @OptionGroup var options: ControllerOptions
        @Argument(help: "The database (docs/gatt-serve.md).") var file: String
        @Option(parsing: .unconditional, help: ArgumentHelp("Stop after this many seconds, 0.1 to 86400 (default: until interrupted or 'quit').", valueName: "SECONDS")) var duration: Double?
        @Flag(name: .customLong("no-service-uuids"), help: "Advertise the name only, not the primary services' UUIDs.") var noServiceUUIDs = false
        @OptionGroup(title: "Pairing (when a central asks)") var pairing: PairingOptions
        @Flag(help: "Also take enhanced ATT bearers (EATT, SPSM 0x0027) from a central on an encrypted link; Server Supported Features says so.")
        var eatt = false
        @Option(help: ArgumentHelp("The ATT_MTU to answer Exchange MTU with, 23 to 517; each link uses the smaller of ours and the central's.", valueName: "OCTETS"))
        var attMTU: Int = 517
        @Option(help: ArgumentHelp("Peripheral Preferred Connection Parameters for the GAP service: MIN:MAX:LATENCY:TIMEOUT, intervals in 1.25 ms units (6 to 3200), latency in events (0 to 499), timeout in 10 ms units (10 to 3200); 'none' in a field says no preference.",
                                   valueName: "PARAMETERS"), transform: parsePreferredConnectionParameters)
        var preferredConnectionParameters: PreferredConnectionParameters?
        @Flag(help: "With --preferred-connection-parameters: ask each central for them 5 s after it connects, unless the link has them (an L2CAP Connection Parameter Update Request).")
        var requestPreferredParameters = false

        func validate() throws {
            if let d = duration, !(d.isFinite && (0.1...86_400).contains(d)) { throw ValidationError("--duration must be between 0.1 and 86400 seconds, not \(d)") }
            try validateATTMTU(attMTU)
            if requestPreferredParameters, preferredConnectionParameters == nil {
                throw ValidationError("--request-preferred-parameters needs --preferred-connection-parameters")
            }
        }

        /// Parses the file; errors read `FILE:LINE:COLUMN: path: message`.
        func load() throws -> (DatabaseFile, AttributeDatabase) {
            guard let data = FileManager.default.contents(atPath: file) else { throw CLIError("cannot read \(file)") }
            do {
                let spec = try DatabaseFile(parsing: [UInt8](data))
                return (spec, try spec.database(enhancedATT: eatt, preferredConnectionParameters: preferredConnectionParameters))
            } catch let e as JSONSyntaxError {
                throw CLIError("\(file):\(e.line):\(e.column): invalid JSON: \(e.message)")
            } catch let e as JSONSchemaError {
                throw CLIError("\(file):\(e)")
            }
        }

        func run() async throws {
            let (spec, db) = try load()
            let name = spec.name ?? "btctl"
            // A central's pairing prompts are answered on the console (`ConsoleAnswers`);
            // bonds go to the adapter's bond file, so a bonded central encrypts from it.
            let answers = ConsoleAnswers()
            let store = AdapterBondStore(path: pairing.store.bonds)
            let (host, writer) = try await options.openHost(security: pairing.securityOptions(store: store, json: options.json, answers: answers),
                                                            deviceName: name, attMTU: UInt16(attMTU), enhancedATT: eatt,
                                                            preferredConnectionParameters: preferredConnectionParameters,
                                                            requestsPreferredParameters: requestPreferredParameters)
            defer { writer?.close() }
            do {
                let address = try await host.start().address
                store.bind(adapter: address)
                let peripheral = host.peripheral
                // The file's services, published through the facade after its GAP and GATT
                // services: the same handles `load()` laid out and checked.
                let published = try await ServedDatabase.publish(spec, on: peripheral)
                let served = await host.server.database
                if served.attributes.count != db.attributes.count { options.logger.warning("served \(served.attributes.count) attributes, the file lays out \(db.attributes.count)") }
                let links = host.connectionEvents()
                let changes = peripheral.events()
                let security = await host.securityEvents()
                let uuids = noServiceUUIDs ? [] : spec.primaryServiceUUIDs
                let (adv, response) = AdvertisingData.server(name: name, serviceUUIDs: uuids)
                // Advertising resumes by itself when a central leaves (the facade does it).
                try await peripheral.startAdvertising(adv, scanResponse: response, intervalMilliseconds: 100)
                let json = options.json
                let started = ContinuousClock.now
                let tally = EventTally()
                /// Counts the event for the summary and shows it: a JSON line, or the text
                /// (a console error's on standard error).
                @Sendable func report(_ o: [(String, JSONValue)], _ text: String) {
                    tally.count(o)
                    consoleReport(json: json, o, text)
                }
                let shown = adv.serviceUUIDs.map(\.description)
                report([("event", .string("advertising")), ("name", .string(name)), ("address", .string(address.description)),
                        ("services", .array(shown.map { .string($0) })), ("complete", .bool(adv.serviceUUIDsComplete)), ("attributes", .int(served.attributes.count))],
                       "advertising \"\(name)\" from \(address)\(shown.isEmpty ? "" : " with services " + shown.joined(separator: ", ") + (adv.serviceUUIDsComplete ? "" : " (not all fit)")), serving \(served.attributes.count) attributes; type 'help' for commands")
                let linkPrinter = Task {
                    for await e in links {
                        switch e {
                        case let .connected(c):
                            report([("event", .string("connected")), ("handle", .int(Int(c.handle))), ("peer", .string("\(c.peer)"))], "connected: \(c.peer) (handle 0x\(hex4(c.handle)))")
                        case let .disconnected(c, reason) where !Interrupt.requested:
                            answers.withdraw(peer: c.peer)
                            report([("event", .string("disconnected")), ("handle", .int(Int(c.handle))), ("reason", .string(reason.description))],
                                   "disconnected: handle 0x\(hex4(c.handle)), \(reason)")
                        case let .enhancedBearerAccepted(c, mtu):
                            report([("event", .string("eatt")), ("handle", .int(Int(c.handle))), ("mtu", .int(mtu))],
                                   "enhanced ATT bearer: handle 0x\(hex4(c.handle)), ATT_MTU \(mtu)")
                        default: break
                        }
                    }
                }
                let securityPrinter = Task {
                    for await e in security {
                        if case let .pairingFailed(_, peer, _) = e { answers.withdraw(peer: peer) }
                        if let (fields, text) = securityReport(e) { report(fields, text) }
                    }
                }
                let printer = Task {
                    for await e in changes {
                        switch e {
                        case let .written(c, v, central):
                            guard let h = published.handle(of: c) else { continue }
                            report([("event", .string("written")), ("handle", .int(Int(h))), ("value", .string(v.hexString)), ("connection", .int(Int(central.handle)))],
                                   "written " + valueLine(h, v))
                        case let .descriptorWritten(d, v, central):
                            guard let h = try? await peripheral.handle(of: d) else { continue }
                            report([("event", .string("written")), ("handle", .int(Int(h))), ("value", .string(v.hexString)), ("connection", .int(Int(central.handle)))],
                                   "written " + valueLine(h, v))
                        case let .subscriptionChanged(c, central, n, i):
                            guard let h = published.handle(of: c) else { continue }
                            report([("event", .string("subscription")), ("handle", .int(Int(h))), ("notify", .bool(n)), ("indicate", .bool(i)), ("connection", .int(Int(central.handle)))],
                                   "subscription 0x\(hex4(h)): notify=\(n) indicate=\(i)")
                        case .advertisingEnded:
                            break  // gatt serve advertises with no duration or event limit
                        case .advertisingConnected:
                            break  // its one set: the connection events report the link
                        }
                    }
                }
                // The controller going away (the host's state says so as it happens)
                // ends serving too, as a failure: exit status 1 after the summary.
                let lost = FirstReason()
                await withTaskGroup(of: Void.self) { group in
                    group.addTask {
                        let d = duration.map { cliDuration(seconds: $0) }
                        if let why = await Interrupt.sleep(for: d, orUntilTheTransportOf: host) { lost.set(why) }
                    }
                    group.addTask {
                        // `quit` ends serving; at end of input serving goes on.
                        let quit = await Self.console(peripheral, published, answers: answers, json: json, report: report)
                        answers.close()
                        if quit { return }
                        await Interrupt.waitForSignal()
                    }
                    await group.next()
                    group.cancelAll()
                }
                // Advertising stops, every central is disconnected (on a signal the
                // signal's own shutdown has done it), the host closes.
                if !Interrupt.requested { await host.shutdown() }
                answers.close()
                // What the host said before it closed is shown before the summary: a closed
                // host finishes the streams, so the printers end (bounded, in case a
                // signal's shutdown is still under way).
                await waitFor([linkPrinter, printer, securityPrinter], within: .seconds(2))
                linkPrinter.cancel(); printer.cancel(); securityPrinter.cancel()
                let n = tally.counts
                let seconds = tenthsOfSecondsSince(started)
                func plural(_ k: Int, _ one: String) -> String { "\(k) \(one)\(k == 1 ? "" : "s")" }
                let fields: [(String, Int)] = [("connections", n["connected", default: 0]), ("pairings", n["paired", default: 0]),
                                               ("writes", n["written", default: 0]), ("subscriptions", n["subscription", default: 0]),
                                               ("notified", n["notified", default: 0]), ("indicated", n["indicated", default: 0]),
                                               ("errors", n["error", default: 0])]
                report([("event", .string("summary")), ("seconds", .double(seconds))] + fields.map { ($0.0, .int($0.1)) },
                       "served for \(seconds) s: \(plural(fields[0].1, "connection")), \(plural(fields[1].1, "pairing")), \(plural(fields[2].1, "write")), "
                           + "\(plural(fields[3].1, "subscription change")), \(plural(fields[4].1, "notification")) and \(plural(fields[5].1, "indication")) sent, "
                           + plural(fields[6].1, "console error"))
                if !Interrupt.requested, let why = lost.reason { throw ControllerWentAway(why: why) }
            } catch let lost as ControllerWentAway {
                throw CLIError(lost.description)
            } catch {
                await host.close()
                throw CLIError("serve failed: \(error)")
            }
        }

        /// Runs the commands typed on standard input until `quit` (returns true) or the
        /// end of input (false), as `Console.run` does. Each result is reported; a bad
        /// command is an `error` event (on standard error in text mode) and serving goes on.
        static func console(_ peripheral: PeripheralManager, _ published: ServedDatabase, answers: ConsoleAnswers, json: Bool,
                            report: @escaping @Sendable (_ o: [(String, JSONValue)], _ text: String) -> Void) async -> Bool {
            await Console.run(answers: answers) { line in await run(line, peripheral, published, report: report) }
        }

        /// Runs one console line; true for `quit`.
        static func run(_ line: String, _ peripheral: PeripheralManager, _ published: ServedDatabase,
                        report: (_ o: [(String, JSONValue)], _ text: String) -> Void) async -> Bool {
            do {
                guard let command = try ServeCommand.parse(line) else { return false }
                let db = await peripheral.host.server.database
                switch command {
                case .quit: return true
                case .help: FileHandle.standardError.write(Data((ServeCommand.usage + "\n").utf8))
                case let .set(t, v):
                    let a = try ServeCommand.resolve(t, in: db, value: v, needs: nil)
                    try await peripheral.setValue(v, of: try published.characteristic(at: a))
                    report([("event", .string("set"))] + valueJSON(a.handle, v, uuid: a.type), "set " + valueLine(a.handle, v, uuid: a.type))
                case let .notify(t, v), let .indicate(t, v):
                    let notify = if case .notify = command { true } else { false }
                    let a = try ServeCommand.resolve(t, in: db, value: v, needs: notify ? .notify : .indicate)
                    let c = try published.characteristic(at: a)
                    let value = v ?? a.value
                    // Notified: the links notified. Indicated: the links that confirmed.
                    let reached = notify ? try await peripheral.notify(c, value: value) : try await peripheral.indicate(c, value: value)
                    let (event, key, how) = notify ? ("notified", "connections", " to") : ("indicated", "confirmed", ", confirmed by")
                    report([("event", .string(event))] + valueJSON(a.handle, value, uuid: a.type) + [(key, .array(reached.map { .int(Int($0.handle)) }))],
                           "\(event) " + valueLine(a.handle, value, uuid: a.type) + "\(how) \(reached.count) subscriber\(reached.count == 1 ? "" : "s")")
                }
            } catch {
                report([("event", .string("error")), ("command", .string(line)), ("message", .string("\(error)"))], "btctl: \(error)")
            }
            return false
        }
    }
}

/// The file's services as the facade publishes them, and where their characteristics'
/// values are.
struct ServedDatabase: Sendable {
    let characteristics: [UInt16: Characteristic]

    static func publish(_ spec: DatabaseFile, on peripheral: PeripheralManager) async throws -> ServedDatabase {
        var byHandle: [UInt16: Characteristic] = [:]
        var published: [Service] = []
        for s in spec.services {
            let service = Service(uuid: s.uuid, isPrimary: s.primary, includedServices: s.includes.map { published[$0] },
                                  characteristics: s.characteristics.map { g in
                Characteristic(uuid: g.uuid, properties: g.properties, permissions: g.permissions, value: g.value, maximumLength: g.maximumLength,
                               descriptors: g.descriptors.map { Descriptor(uuid: $0.uuid, value: $0.value, permissions: $0.permissions) })
            })
            try await peripheral.add(service)
            published.append(service)
            for c in service.characteristics { byHandle[try await peripheral.handles(of: c).value] = c }
        }
        return ServedDatabase(characteristics: byHandle)
    }

    func handle(of c: Characteristic) -> UInt16? { characteristics.first { $0.value === c }?.key }

    /// The file's characteristic whose value attribute `a` is (the GAP and GATT
    /// services' characteristics are the host's, not the file's).
    func characteristic(at a: Attribute) throws(CLIError) -> Characteristic {
        guard let c = characteristics[a.handle] else { throw CLIError("\(named(a.type)) at 0x\(hex4(a.handle)) belongs to the host's own services, not to the file's") }
        return c
    }
}

/// How many of each JSON event `gatt serve` reported, for its closing summary.
private final class EventTally: Sendable {
    private let state = Mutex<[String: Int]>([:])
    func count(_ o: [(String, JSONValue)]) {
        guard case let .string(name)? = o.first(where: { $0.0 == "event" })?.1 else { return }
        state.withLock { $0[name, default: 0] += 1 }
    }
    var counts: [String: Int] { state.withLock { $0 } }
}

/// `--connection-parameters MIN:MAX:LATENCY:TIMEOUT`, as LE Create Connection takes them
/// (`LEConnectionParameters.fault`).
func parseConnectionParameters(_ s: String) throws -> LEConnectionParameters {
    let fields = s.split(separator: ":", omittingEmptySubsequences: false).map { UInt16($0) }
    guard fields.count == 4, let a = fields[0], let b = fields[1], let l = fields[2], let t = fields[3] else {
        throw ValidationError("--connection-parameters is MIN:MAX:LATENCY:TIMEOUT, not '\(s)'")
    }
    let p = LEConnectionParameters(connectionIntervalMin: a, connectionIntervalMax: b, maxLatency: l, supervisionTimeout: t)
    if let fault = p.fault { throw ValidationError("--connection-parameters: \(fault)") }
    return p
}

/// `--preferred-connection-parameters MIN:MAX:LATENCY:TIMEOUT` ('none' for 0xFFFF), in
/// §12.3's ranges.
func parsePreferredConnectionParameters(_ s: String) throws -> PreferredConnectionParameters {
    let fields = s.split(separator: ":", omittingEmptySubsequences: false).map { f -> UInt16? in
        f.lowercased() == "none" ? PreferredConnectionParameters.noPreference : UInt16(f)
    }
    guard fields.count == 4, let a = fields[0], let b = fields[1], let l = fields[2], let t = fields[3] else {
        throw ValidationError("--preferred-connection-parameters is MIN:MAX:LATENCY:TIMEOUT, not '\(s)'")
    }
    let p = PreferredConnectionParameters(intervalMin: a, intervalMax: b, latency: l, supervisionTimeout: t)
    guard p.isValid else {
        throw ValidationError("--preferred-connection-parameters: intervals 6 to 3200 (MIN at most MAX), latency 0 to 499, timeout 10 to 3200, or 'none'; not '\(s)'")
    }
    return p
}
