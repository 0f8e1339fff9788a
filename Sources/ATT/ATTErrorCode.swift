// ATT error codes (Core Specification v5.4, Vol 3, Part F, §3.4.1.1).

import HCI

/// ATT error codes (§3.4.1.1), an open set: 0x80–0x9F are application errors,
/// 0xE0–0xFF common profile and service errors (Core Specification Supplement, Part B).
public struct ATTErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible, Error {
    public var rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let invalidHandle = ATTErrorCode(rawValue: 0x01)
    public static let readNotPermitted = ATTErrorCode(rawValue: 0x02)
    public static let writeNotPermitted = ATTErrorCode(rawValue: 0x03)
    public static let invalidPDU = ATTErrorCode(rawValue: 0x04)
    public static let insufficientAuthentication = ATTErrorCode(rawValue: 0x05)
    public static let requestNotSupported = ATTErrorCode(rawValue: 0x06)
    public static let invalidOffset = ATTErrorCode(rawValue: 0x07)
    public static let insufficientAuthorization = ATTErrorCode(rawValue: 0x08)
    public static let prepareQueueFull = ATTErrorCode(rawValue: 0x09)
    public static let attributeNotFound = ATTErrorCode(rawValue: 0x0A)
    public static let attributeNotLong = ATTErrorCode(rawValue: 0x0B)
    public static let encryptionKeySizeTooShort = ATTErrorCode(rawValue: 0x0C)
    public static let invalidAttributeValueLength = ATTErrorCode(rawValue: 0x0D)
    public static let unlikelyError = ATTErrorCode(rawValue: 0x0E)
    public static let insufficientEncryption = ATTErrorCode(rawValue: 0x0F)
    public static let unsupportedGroupType = ATTErrorCode(rawValue: 0x10)
    public static let insufficientResources = ATTErrorCode(rawValue: 0x11)
    public static let databaseOutOfSync = ATTErrorCode(rawValue: 0x12)
    public static let valueNotAllowed = ATTErrorCode(rawValue: 0x13)
    public static let writeRequestRejected = ATTErrorCode(rawValue: 0xFC)
    public static let cccdImproperlyConfigured = ATTErrorCode(rawValue: 0xFD)
    public static let procedureAlreadyInProgress = ATTErrorCode(rawValue: 0xFE)
    public static let outOfRange = ATTErrorCode(rawValue: 0xFF)

    public var name: String {
        let names: [UInt8: String] = [
            0x01: "Invalid Handle", 0x02: "Read Not Permitted", 0x03: "Write Not Permitted", 0x04: "Invalid PDU",
            0x05: "Insufficient Authentication", 0x06: "Request Not Supported", 0x07: "Invalid Offset",
            0x08: "Insufficient Authorization", 0x09: "Prepare Queue Full", 0x0A: "Attribute Not Found",
            0x0B: "Attribute Not Long", 0x0C: "Encryption Key Size Too Short", 0x0D: "Invalid Attribute Value Length",
            0x0E: "Unlikely Error", 0x0F: "Insufficient Encryption", 0x10: "Unsupported Group Type",
            0x11: "Insufficient Resources", 0x12: "Database Out Of Sync", 0x13: "Value Not Allowed",
            0xFC: "Write Request Rejected", 0xFD: "Client Characteristic Configuration Descriptor Improperly Configured",
            0xFE: "Procedure Already in Progress", 0xFF: "Out of Range",
        ]
        if let n = names[rawValue] { return n }
        if (0x80...0x9F).contains(rawValue) { return "Application Error" }
        if rawValue >= 0xE0 { return "Common Profile and Service Error" }
        return "Reserved"
    }

    public var description: String { "\(name) (0x\(hex2(rawValue)))" }
}
