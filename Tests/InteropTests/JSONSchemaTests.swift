// Every btctl command's --json output against its schema in docs/schemas/: the
// commands run for real (on the in-process radio, on recorded traces), and each line
// must match one of the schema's alternatives. A validator for the subset of JSON
// Schema those files use (type, const, enum, pattern, required, properties,
// additionalProperties, items, oneOf, minimum) is below.

import Foundation
import Testing

/// A JSON Schema subset, enough for docs/schemas; unknown keywords are errors, so a
/// schema cannot silently say more than is checked.
struct JSONSchema {
    let root: [String: Any]

    init(path: String) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        guard let o = try JSONSerialization.jsonObject(with: data) as? [String: Any] else { throw SchemaError("\(path): not an object") }
        root = o
        try Self.checkKeywords(o, at: path)
    }

    struct SchemaError: Error, CustomStringConvertible {
        var description: String
        init(_ d: String) { description = d }
    }

    static let keywords: Set<String> = ["$schema", "$id", "title", "description", "type", "const", "enum", "pattern", "required",
                                         "properties", "additionalProperties", "items", "oneOf", "minimum"]

    static func checkKeywords(_ s: [String: Any], at path: String) throws {
        for k in s.keys where !keywords.contains(k) { throw SchemaError("\(path): unsupported keyword \(k)") }
        for (name, sub) in (s["properties"] as? [String: Any]) ?? [:] {
            guard let sub = sub as? [String: Any] else { throw SchemaError("\(path)/\(name): not a schema") }
            try checkKeywords(sub, at: path + "/" + name)
        }
        if let items = s["items"] as? [String: Any] { try checkKeywords(items, at: path + "/items") }
        for (i, alt) in ((s["oneOf"] as? [Any]) ?? []).enumerated() {
            guard let alt = alt as? [String: Any] else { throw SchemaError("\(path)/oneOf/\(i): not a schema") }
            try checkKeywords(alt, at: path + "/oneOf/\(i)")
        }
    }

    /// Problems with `value`; empty when it matches.
    func problems(_ value: Any) -> [String] { Self.problems(value, root, at: "$") }

    static func typeName(_ v: Any) -> String {
        if v is NSNull { return "null" }
        if let n = v as? NSNumber {
            // Foundation's JSON booleans are a distinct class; fractions are doubles ("d").
            if String(describing: type(of: v)).contains("Boolean") { return "boolean" }
            let kind = String(cString: n.objCType)
            return kind == "d" || kind == "f" ? "number" : "integer"
        }
        if v is String { return "string" }
        if v is [Any] { return "array" }
        if v is [String: Any] { return "object" }
        return "unknown"
    }

    static func problems(_ v: Any, _ s: [String: Any], at path: String) -> [String] {
        var out: [String] = []
        if let t = s["type"] {
            let allowed = (t as? [String]) ?? [(t as? String) ?? ""]
            let actual = typeName(v)
            if !(allowed.contains(actual) || (actual == "integer" && allowed.contains("number"))) {
                return ["\(path): \(actual), expected \(allowed.joined(separator: " or "))"]
            }
        }
        if let c = s["const"], "\(c)" != "\(v)" || typeName(c) != typeName(v) { out.append("\(path): \(v), expected \(c)") }
        if let e = s["enum"] as? [Any], !e.contains(where: { "\($0)" == "\(v)" }) { out.append("\(path): \(v) is not one of \(e)") }
        if let p = s["pattern"] as? String, let str = v as? String, str.range(of: p, options: .regularExpression) == nil { out.append("\(path): '\(str)' does not match \(p)") }
        if let m = s["minimum"] as? Double, let n = v as? Double, n < m { out.append("\(path): \(n) < \(m)") }
        if let o = v as? [String: Any] {
            for r in (s["required"] as? [String]) ?? [] where o[r] == nil { out.append("\(path): missing \(r)") }
            let props = (s["properties"] as? [String: Any]) ?? [:]
            for (k, sub) in o {
                if let ps = props[k] as? [String: Any] {
                    out += problems(sub, ps, at: path + "." + k)
                } else if (s["additionalProperties"] as? Bool) == false {
                    out.append("\(path): unexpected key \(k)")
                }
            }
        }
        if let a = v as? [Any], let items = s["items"] as? [String: Any] {
            for (i, x) in a.enumerated() { out += problems(x, items, at: path + "[\(i)]") }
        }
        if let alts = s["oneOf"] as? [[String: Any]] {
            let results = alts.map { problems(v, $0, at: path) }
            let matching = results.filter(\.isEmpty).count
            if matching != 1 {
                let closest = results.min { $0.count < $1.count } ?? []
                out.append("\(path): matches \(matching) of \(alts.count) alternatives" + (matching == 0 ? " (closest: \(closest.joined(separator: "; ")))" : ""))
            }
        }
        return out
    }
}

@Suite(.serialized, .liveTimeLimit) struct JSONSchemaTests {
    static let schemas = Interop.root + "/docs/schemas/"

    /// Validates every line of `out` against `schema`; returns the lines.
    static func check(_ out: String, against schema: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> [[String: Any]] {
        let s = try JSONSchema(path: schemas + schema + ".schema.json")
        var objects: [[String: Any]] = []
        for line in out.split(separator: "\n") {
            guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                Issue.record("\(schema): not a JSON object: \(line)", sourceLocation: sourceLocation)
                continue
            }
            let p = s.problems(o)
            #expect(p.isEmpty, "\(schema): \(p.joined(separator: "; ")) in \(line)", sourceLocation: sourceLocation)
            objects.append(o)
        }
        return objects
    }

    static func run(_ args: [String], interrupt: (signal: Int32, whenOutputContains: String)? = nil) async throws -> (status: Int32, out: String) {
        try await Interop.execute(BtctlGATTTests.btctl, args, timeout: 60, interrupt: interrupt)
    }

    @Test func everySchemaIsWellFormedAndEveryCommandHasOne() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.schemas).filter { $0.hasSuffix(".schema.json") }.sorted()
        for f in files { _ = try JSONSchema(path: Self.schemas + f) }
        let expected = ["advertise", "bonds", "demo", "gatt-discover", "gatt-read", "gatt-serve", "gatt-subscribe", "gatt-write",
                        "info", "l2cap", "leinfo", "list", "pair", "radio", "scan", "shell", "sync", "trace-replay", "trace-show"]
        #expect(files.map { String($0.dropLast(".schema.json".count)) } == expected)
        // The validator rejects what it must (a test that cannot fail proves nothing).
        let scan = try JSONSchema(path: Self.schemas + "scan.schema.json")
        #expect(!scan.problems(["event": "advertisement", "address": "x", "address_type": "public", "rssi": "-50", "event_type": 0,
                                "connectable": true, "scan_response": false]).isEmpty, "a number as a string")
        #expect(!scan.problems(["event": "advertisement"]).isEmpty, "missing fields")
        #expect(!scan.problems(["event": "nonsense"]).isEmpty, "unknown event")
    }

    @Test func commandsOnTheVirtualRadioMatchTheirSchemas() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let demo = try await Self.run(["demo", "--json"])
        #expect(demo.status == 0)
        #expect(try Self.check(demo.out, against: "demo").count >= 15)

        let info = try await Self.run(["info", "-t", "virtual", "--json"])
        #expect(info.status == 0)
        #expect(try Self.check(info.out, against: "info").count == 1)

        let scan = try await Self.run(["scan", "-t", "virtual", "--json", "--duration", "1"])
        #expect(try Self.check(scan.out, against: "scan").count >= 2)

        let adv = try await Self.run(["advertise", "-t", "virtual", "--json", "--duration", "0.5", "--name", "schema", "--tx-power", "-8"])
        #expect(adv.status == 0)
        #expect(try Self.check(adv.out, against: "advertise").count == 2)

        let peer = ["--name", "FireAlarm-B3", "-t", "virtual", "--json"]
        let discover = try await Self.run(["gatt", "discover"] + peer)
        #expect(discover.status == 0)
        #expect(try Self.check(discover.out, against: "gatt-discover").count > 10)

        let read = try await Self.run(["gatt", "read", "--uuid", "2A00"] + peer)
        #expect(read.status == 0)
        #expect(try Self.check(read.out, against: "gatt-read").first?["text"] as? String == "FireAlarm-B3")

        let write = try await Self.run(["gatt", "write", "--uuid", "F1DE0004-2C4B-4D5E-8F60-7A8B9CADBEEF", "--text", "schema"] + peer)
        #expect(write.status == 0)
        #expect(try Self.check(write.out, against: "gatt-write").count == 1)

        let subscribe = try await Self.run(["gatt", "subscribe", "--uuid", "F1DE0001-2C4B-4D5E-8F60-7A8B9CADBEEF", "--indicate"] + peer,
                                           interrupt: (SIGINT, "\"subscribed\""))
        #expect(subscribe.status == 130)
        let subscribeLines = try Self.check(subscribe.out, against: "gatt-subscribe")
        #expect(subscribeLines.map { $0["event"] as? String } == ["subscribed", "summary"], "\(subscribeLines)")

        let serve = try await Self.run(["gatt", "serve", Interop.root + "/docs/examples/battery.json", "-t", "virtual", "--json", "--duration", "0.5"])
        #expect(serve.status == 0)
        let serveLines = try Self.check(serve.out, against: "gatt-serve")
        #expect(serveLines.first?["event"] as? String == "advertising" && serveLines.last?["event"] as? String == "summary", "\(serveLines)")

        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("btctl-schema-\(getpid())").path
        let bonds = try await Self.run(["bonds", "list", "--json", "--bonds", dir + "/bonds.json", "-t", "virtual"])
        #expect(try Self.check(bonds.out, against: "bonds").isEmpty)
    }

    @Test(arguments: ["rootcanal-gatt-read.btsnoop", "rootcanal-smp-sc-passkey.btsnoop", "rootcanal-scan.btsnoop"])
    func traceShowMatchesItsSchema(fixture: String) async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let r = try await Self.run(["trace", "show", "--json", Interop.root + "/Fixtures/" + fixture])
        #expect(r.status == 0)
        #expect(try Self.check(r.out, against: "trace-show").count > 10)
    }
}
