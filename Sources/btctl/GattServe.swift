// btctl gatt serve FILE.json: serve and advertise a GATT database described in a
// JSON file (schema and example: docs/gatt-serve.md), printing what clients do.

import ArgumentParser
import ATT
import Foundation
import GAP
import GATT
import HCI
import L2CAP
import Snoop

/// The database file.
struct DatabaseFile: Decodable {
    var name: String?
    var services: [Service]

    struct Service: Decodable {
        var uuid: String
        var primary: Bool?
        var characteristics: [Characteristic]?
    }
    struct Characteristic: Decodable {
        var uuid: String
        var properties: [String]
        /// Hex bytes; or `text` for UTF-8.
        var value: String?
        var text: String?
        var permissions: [String]?
        var maxLength: Int?
        var descriptors: [Descriptor]?
    }
    struct Descriptor: Decodable {
        var uuid: String
        var value: String?
        var text: String?
        var permissions: [String]?
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

    /// Checks what Decodable lets through: unknown keys (a typo such as "servces" or
    /// "propertes" would otherwise be ignored), both `value` and `text` on one
    /// attribute, a descriptor listed twice, and a Client Characteristic Configuration
    /// descriptor in the file (the server adds it to every notify/indicate
    /// characteristic). Each error names the JSON path.
    static func validate(_ data: Data) throws {
        guard let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return }  // the decoder reports syntax
        func keys(_ o: [String: Any], _ allowed: Set<String>, _ path: String) throws {
            for k in o.keys.sorted() where !allowed.contains(k) {
                throw CLIError("\(path.isEmpty ? "" : path + ": ")unknown key '\(k)' (known: \(allowed.sorted().joined(separator: ", ")))")
            }
            if o["value"] != nil, o["text"] != nil { throw CLIError("\(path): give 'value' (hex) or 'text', not both") }
        }
        try keys(root, ["name", "services"], "")
        for (i, s) in ((root["services"] as? [[String: Any]]) ?? []).enumerated() {
            let sp = "services[\(i)]"
            try keys(s, ["uuid", "primary", "characteristics"], sp)
            for (j, c) in ((s["characteristics"] as? [[String: Any]]) ?? []).enumerated() {
                let cp = "\(sp).characteristics[\(j)]"
                try keys(c, ["uuid", "properties", "value", "text", "permissions", "maxLength", "descriptors"], cp)
                var seen: Set<BluetoothUUID> = []
                for (k, d) in ((c["descriptors"] as? [[String: Any]]) ?? []).enumerated() {
                    let dp = "\(cp).descriptors[\(k)]"
                    try keys(d, ["uuid", "value", "text", "permissions"], dp)
                    guard let u = (d["uuid"] as? String).flatMap(BluetoothUUID.init) else { continue }
                    if u == GATTType.clientCharacteristicConfiguration {
                        throw CLIError("\(dp): 2902 (Client Characteristic Configuration) is added by the server to every notify/indicate characteristic; remove it")
                    }
                    if !seen.insert(u).inserted { throw CLIError("\(dp): descriptor \(u) is listed twice") }
                }
            }
        }
    }

    /// Builds the database (the mandatory GAP and GATT services first, then the
    /// file's); every error names the JSON path of the bad field.
    func database() throws -> AttributeDatabase {
        var db = AttributeDatabase()
        _ = try db.addMandatoryServices(deviceName: name ?? "btctl")
        func uuid(_ s: String, _ path: String) throws -> BluetoothUUID {
            guard let u = BluetoothUUID(s) else { throw CLIError("\(path): '\(s)' is not a UUID (use 180F or a 128-bit UUID)") }
            return u
        }
        func bytes(_ hex: String?, _ text: String?, _ path: String) throws -> [UInt8] {
            if let text { return Array(text.utf8) }
            guard let hex else { return [] }
            guard let b = [UInt8](hex: hex) else { throw CLIError("\(path).value: '\(hex)' is not hex bytes") }
            return b
        }
        func permissions(_ names: [String]?, _ path: String) throws -> AttributePermissions? {
            guard let names else { return nil }
            var p: AttributePermissions = []
            for n in names {
                guard let v = Self.permissionNames[n] else { throw CLIError("\(path).permissions: unknown '\(n)' (known: \(Self.permissionNames.keys.sorted().joined(separator: ", ")))") }
                p.insert(v)
            }
            return p
        }
        for (i, s) in services.enumerated() {
            let sp = "services[\(i)]"
            var chars: [GATTCharacteristic] = []
            for (j, c) in (s.characteristics ?? []).enumerated() {
                let cp = "\(sp).characteristics[\(j)]"
                var props: CharacteristicProperties = []
                for n in c.properties {
                    guard let p = Self.propertyNames[n] else { throw CLIError("\(cp).properties: unknown '\(n)' (known: \(Self.propertyNames.keys.sorted().joined(separator: ", ")))") }
                    props.insert(p)
                }
                var descriptors: [GATTDescriptor] = []
                for (k, d) in (c.descriptors ?? []).enumerated() {
                    let dp = "\(cp).descriptors[\(k)]"
                    descriptors.append(GATTDescriptor(uuid: try uuid(d.uuid, dp), permissions: try permissions(d.permissions, dp) ?? .read, value: try bytes(d.value, d.text, dp)))
                }
                chars.append(GATTCharacteristic(uuid: try uuid(c.uuid, cp), properties: props, permissions: try permissions(c.permissions, cp),
                                                value: try bytes(c.value, c.text, cp), maximumLength: c.maxLength ?? 512, descriptors: descriptors))
            }
            do {
                try db.add(GATTService(uuid: try uuid(s.uuid, sp), isPrimary: s.primary ?? true, characteristics: chars))
            } catch let e as CLIError { throw e } catch { throw CLIError("\(sp): \(error)") }
        }
        if let hash = db.attributes.first(where: { $0.type == GATTCharacteristicType.databaseHash })?.handle { try db.refreshDatabaseHash(at: hash) }
        return db
    }
}

extension Gatt {
    struct Serve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Serve and advertise a GATT database described in a JSON file.")
        @OptionGroup var options: ControllerOptions
        @Argument(help: "The database (docs/gatt-serve.md).") var file: String
        @Option(parsing: .unconditional, help: ArgumentHelp("Stop after this many seconds, 0.1 to 86400 (default: until interrupted).", valueName: "SECONDS")) var duration: Double?

        func validate() throws {
            if let d = duration, !(d.isFinite && (0.1...86_400).contains(d)) { throw ValidationError("--duration must be between 0.1 and 86400 seconds, not \(d)") }
        }

        func run() async throws {
            guard let data = FileManager.default.contents(atPath: file) else { throw CLIError("cannot read \(file)") }
            let spec: DatabaseFile
            do { try DatabaseFile.validate(data) } catch let e as CLIError { throw CLIError("\(file): \(e)") }
            do { spec = try JSONDecoder().decode(DatabaseFile.self, from: data) } catch { throw CLIError("\(file): not a valid database file: \(error)") }
            let db = try spec.database()
            let (controller, writer) = try await options.openController()
            defer { writer?.close() }
            do {
                try await controller.initialize()
                let host = L2CAPHost(controller: controller, logger: options.logger)
                await host.start()
                let server = GATTServer(database: db, loop: controller.loop, logger: options.logger)
                let connections = await host.newConnections()
                let hciEvents = await controller.events()
                let name = Array((spec.name ?? "btctl").utf8.prefix(26))
                let adv = ADStructure.encode([ADStructure(type: 0x01, data: [0x06]), ADStructure(type: 0x09, data: name)])
                let advertise: @Sendable () async throws -> Void = {
                    try await controller.send(LESetAdvertisingParameters(advertisingIntervalMin: 0x00A0, advertisingIntervalMax: 0x00A0, advertisingType: 0))
                    try await controller.send(LESetAdvertisingData(data: adv))
                    try await controller.send(LESetAdvertisingEnable(advertisingEnable: true))
                }
                try await advertise()
                let json = options.json
                func report(_ o: [(String, JSONValue)], _ text: String) {
                    if json { emit(.object(o)) } else { print(text) }
                    fflush(nil)
                }
                report([("event", .string("advertising")), ("name", .string(String(decoding: name, as: UTF8.self))), ("attributes", .int(db.attributes.count))],
                       "advertising \"\(String(decoding: name, as: UTF8.self))\", serving \(db.attributes.count) attributes")
                let acceptor = Task {
                    for await c in connections {
                        report([("event", .string("connected")), ("handle", .int(Int(c.handle))), ("peer", .string("\(c.peer)"))], "connected: \(c.peer) (handle 0x\(String(c.handle, radix: 16)))")
                        await server.attach(ATTBearer(channel: await L2CAPATTChannel(host: host, handle: c.handle), logger: options.logger), connection: c.handle)
                    }
                }
                // Advertising stops when a central connects; start it again when the link drops.
                let readvertiser = Task {
                    for await e in hciEvents {
                        if case let .disconnectionComplete(d) = e, !Interrupt.requested {
                            report([("event", .string("disconnected")), ("handle", .int(Int(d.connectionHandle))), ("reason", .string(d.reason.description))],
                                   "disconnected: handle 0x\(String(d.connectionHandle, radix: 16)), \(d.reason)")
                            try? await advertise()
                        }
                    }
                }
                let printer = Task {
                    for await e in server.events {
                        switch e {
                        case let .written(h, v, c):
                            report([("event", .string("written")), ("handle", .int(Int(h))), ("value", .string(v.hexString)), ("connection", .int(Int(c)))],
                                   "written " + valueLine(h, v))
                        case let .subscription(h, c, n, i):
                            report([("event", .string("subscription")), ("handle", .int(Int(h))), ("notify", .bool(n)), ("indicate", .bool(i)), ("connection", .int(Int(c)))],
                                   "subscription 0x\(String(h, radix: 16)): notify=\(n) indicate=\(i)")
                        default: break
                        }
                    }
                }
                // On SIGINT/SIGTERM: stop advertising, disconnect every central, then exit.
                Interrupt.onSignal {
                    _ = try? await controller.send(LESetAdvertisingEnable(advertisingEnable: false))
                    for c in await host.currentConnections { await Central.disconnect(c, host: host, within: .seconds(2)) }
                }
                if let duration {
                    await Interrupt.sleep(for: cliDuration(seconds: duration))
                } else {
                    while !Interrupt.requested, await !controller.isClosed { await Interrupt.sleep(for: .seconds(1)) }
                }
                acceptor.cancel(); readvertiser.cancel(); printer.cancel()
                _ = try? await controller.send(LESetAdvertisingEnable(advertisingEnable: false))
                await controller.close()
            } catch {
                await controller.close()
                throw CLIError("serve failed: \(error)")
            }
        }
    }
}
