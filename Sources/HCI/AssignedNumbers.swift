// Names from the Bluetooth SIG's assigned numbers: 16-bit UUIDs (services,
// characteristics, descriptors, units, GATT declarations), well-known 128-bit UUIDs,
// company identifiers and appearance values. The tables are generated, one file per
// kind (AssignedNumbers+UUIDs, +Units, +Companies, +Appearance, by
// Scripts/assigned-numbers.sh from the PyPI package bluetooth-numbers), and parsed
// once, on first use.

public enum AssignedNumbers {
    /// The table's "HEX\tname" lines as a dictionary.
    static func parse(_ table: String) -> [String: String] {
        var d: [String: String] = [:]
        for line in table.split(separator: "\n") {
            guard let tab = line.firstIndex(of: "\t") else { continue }
            d[String(line[..<tab])] = String(line[line.index(after: tab)...])
        }
        return d
    }

    static func parse16(_ table: String) -> [UInt16: String] {
        var d: [UInt16: String] = [:]
        for (k, v) in parse(table) { if let n = UInt16(k, radix: 16) { d[n] = v } }
        return d
    }

    static let services = parse16(serviceTable)
    static let characteristics = parse16(characteristicTable)
    static let descriptors = parse16(descriptorTable)
    static let units = parse16(unitTable)
    static let companies = parse16(companyTable)
    static let appearanceCategories = parse16(appearanceCategoryTable)
    static let appearances = parse16(appearanceTable)
    static let longUUIDs = parse(longUUIDTable)

    /// GATT declarations (Assigned Numbers §3.6), which the package files with none of the above.
    static let declarations: [UInt16: String] = [
        0x2800: "Primary Service", 0x2801: "Secondary Service", 0x2802: "Include", 0x2803: "Characteristic",
    ]

    public static func serviceName(_ uuid: UInt16) -> String? { services[uuid] }
    public static func characteristicName(_ uuid: UInt16) -> String? { characteristics[uuid] }
    public static func descriptorName(_ uuid: UInt16) -> String? { descriptors[uuid] }
    public static func unitName(_ uuid: UInt16) -> String? { units[uuid] }
    public static func companyName(_ id: UInt16) -> String? { companies[id] }

    /// "Heart Rate Sensor: Heart Rate Belt", "Computer", or nil for an unknown category.
    public static func appearanceName(_ value: UInt16) -> String? {
        guard let category = appearanceCategories[value >> 6] else { return nil }
        if value & 0x3F == 0 { return category }
        return appearances[value].map { "\(category): \($0)" } ?? "\(category) (subcategory \(value & 0x3F))"
    }

    /// The name of any UUID in the tables: a 16-bit one by its range (0x18xx services,
    /// 0x27xx units, 0x28xx declarations, 0x29xx descriptors, 0x2Axx–0x2Bxx
    /// characteristics; member UUIDs 0xFCxx–0xFExx as services), a 128-bit one by value.
    public static func name(of uuid: BluetoothUUID) -> String? {
        if let short = uuid.uint16 { return name(ofShort: short) }
        return longUUIDs[uuid.description]
    }

    /// The name of a 16-bit UUID (see `name(of:)`), without building the UUID.
    public static func name(ofShort short: UInt16) -> String? {
        services[short] ?? characteristics[short] ?? descriptors[short] ?? declarations[short] ?? units[short]
    }
}

extension BluetoothUUID {
    /// The assigned name ("Battery Service", "Battery Level", "Nordic UART Service"), if any.
    public var name: String? { AssignedNumbers.name(of: self) }
}
