package org.refactx.ntriples;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * The parse stage's per-line work: one N-Triples line of a Wikidata truthy dump
 * in, one staged row out (see {@code refactx_pipeline/parse.py}, {@code STAGED_FIELDS}).
 *
 * <p>A hand-written lexer: one left-to-right scan of the line's characters, no
 * regex and no backtracking, literal escapes decoded in the same scan. It accepts
 * exactly the lines of the N-Triples grammar as {@code tests/ntriples_grammar.py}
 * writes it as one regular expression (a test checks the two agree on generated
 * and real lines). A line it refuses is a {@code reject} whose reason Spark names
 * later from the raw line ({@code parse.reject_reason}): rejects are rare, and
 * naming them here would be a second grammar to keep in step.
 *
 * <p>Called as a Spark SQL function of the line's bytes (a binary column: decoding
 * them here tells invalid UTF-8 apart in the same pass, where a string argument
 * would arrive with U+FFFD in place of the invalid bytes).
 */
public final class NTriplesLexer implements UDF1<byte[], Row> {
    private static final long serialVersionUID = 1L;

    private static final String RDF_TYPE = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>";
    private static final String[] TERM_PREDICATES = {
        "<http://www.w3.org/2000/01/rdf-schema#label>",
        "<http://schema.org/description>",
        "<http://www.w3.org/2004/02/skos/core#altLabel>",
    };
    private static final String[] TERM_KINDS = {"label", "description", "alias"};
    private static final String[] WIKIBASE_NS = {"<http://wikiba.se/ontology#", "<http://wikiba.se/ontology-beta#"};
    private static final String XSD = "http://www.w3.org/2001/XMLSchema#";
    private static final String XSD_STRING = XSD + "string";
    private static final String[][] LITERAL_KINDS = {
        // datatype IRI, object kind, datatype its shape implies
        {XSD + "dateTime", "time", "Time"},
        {XSD + "decimal", "quantity", "Quantity"},
        {"http://www.opengis.net/ont/geosparql#wktLiteral", "coordinate", "GlobeCoordinate"},
        {"http://www.w3.org/1998/Math/MathML", "other", "Math"},
    };

    private final String entityPrefix;
    private final String directClaimPrefix;
    private final String[] propertyTypeIris;
    private final Set<String> languages;

    /**
     * @param entityNamespace       entity IRI namespace ({@code http://www.wikidata.org/entity/})
     * @param directClaimNamespace  direct-claim namespace ({@code http://www.wikidata.org/prop/direct/})
     * @param languages             kept language tags, any case; empty keeps every language
     */
    public NTriplesLexer(String entityNamespace, String directClaimNamespace, String[] languages) {
        this.entityPrefix = "<" + entityNamespace;
        this.directClaimPrefix = "<" + directClaimNamespace;
        this.propertyTypeIris = new String[] {WIKIBASE_NS[0] + "propertyType>", WIKIBASE_NS[1] + "propertyType>"};
        this.languages = new TreeSet<>();
        for (String lang : languages) {
            this.languages.add(lang.toLowerCase(Locale.ROOT));
        }
    }

    /** The positions and decoded parts of one line; -1 marks an absent part. */
    private static final class Line {
        final String s;
        int subjectStart, subjectEnd;
        int predicateStart, predicateEnd;
        int objectStart = -1, objectEnd = -1;  // an IRI or blank node object
        String body;                            // a literal object's decoded text
        int langStart = -1, langEnd = -1;
        int datatypeStart = -1, datatypeEnd = -1;  // inside the <>

        Line(String s) {
            this.s = s;
        }
    }

    @Override
    public Row call(byte[] bytes) {
        String text = new String(bytes, StandardCharsets.UTF_8);
        Line line = isValidUtf8(bytes, text) ? lex(text) : null;
        if (line == null) {
            return isBlankOrComment(text) ? skip("blank_or_comment") : REJECT;
        }
        return classify(line);
    }

    /**
     * Whether {@code bytes} are valid UTF-8, given {@code text}, their lenient decoding: that
     * decoding puts U+FFFD for every malformed sequence, so only a line holding U+FFFD (rare)
     * is decoded again, strictly.
     */
    private static boolean isValidUtf8(byte[] bytes, String text) {
        if (text.indexOf('\uFFFD') < 0) return true;
        try {
            StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(bytes));
            return true;
        } catch (CharacterCodingException e) {
            return false;
        }
    }

    // ------------------------------------------------------------ lexing

    /** The parts of a valid line, or null when the line is not valid N-Triples. */
    static Line lex(String s) {
        Line line = new Line(s);
        int n = s.length();
        int i = skip(s, 0, n, true);

        line.subjectStart = i;
        i = term(s, i, n);
        if (i < 0) return null;
        line.subjectEnd = i;

        int j = skip(s, i, n, false);
        if (j == i) return null;
        line.predicateStart = j;
        i = iri(s, j, n);
        if (i < 0) return null;
        line.predicateEnd = i;

        j = skip(s, i, n, false);
        if (j == i || j == n) return null;
        if (s.charAt(j) == '"') {
            i = literal(line, j, n);
        } else {
            line.objectStart = j;
            i = term(s, j, n);
            line.objectEnd = i;
        }
        if (i < 0) return null;

        i = skip(s, i, n, false);
        if (i == n || s.charAt(i) != '.') return null;
        return skip(s, i + 1, n, true) == n ? line : null;
    }

    /** The index after blanks from {@code i}: spaces and tabs, and carriage returns when {@code cr}. */
    private static int skip(String s, int i, int n, boolean cr) {
        while (i < n) {
            char c = s.charAt(i);
            if (c != ' ' && c != '\t' && !(cr && c == '\r')) break;
            i++;
        }
        return i;
    }

    /** An IRI or a blank node at {@code i}: the index after it, or -1. */
    private static int term(String s, int i, int n) {
        if (i >= n) return -1;
        if (s.charAt(i) == '<') return iri(s, i, n);
        if (s.startsWith("_:", i)) return blankNode(s, i, n);
        return -1;
    }

    /** {@code <...>} at {@code i} with no control, space or {@code <>"{}|^`\} inside: the index after it, or -1. */
    private static int iri(String s, int i, int n) {
        if (i >= n || s.charAt(i) != '<') return -1;
        for (int j = i + 1; j < n; j++) {
            char c = s.charAt(j);
            if (c == '>') return j + 1;
            if (c <= ' ' || c == '<' || c == '"' || c == '{' || c == '}' || c == '|' || c == '^' || c == '`'
                    || c == '\\') {
                return -1;
            }
        }
        return -1;
    }

    /** {@code _:} then a name of letters, digits, {@code _ - .}, not starting with - or . nor ending with . */
    private static int blankNode(String s, int i, int n) {
        int j = i + 2;
        if (j >= n || !isNameStart(s.charAt(j))) return -1;
        j++;
        while (j < n && (isNameStart(s.charAt(j)) || s.charAt(j) == '-' || s.charAt(j) == '.')) j++;
        while (s.charAt(j - 1) == '.') j--;  // a final dot ends the line, not the name
        return j;
    }

    private static boolean isNameStart(char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    }

    /** A literal at {@code i} (its opening quote) with its language tag or datatype; the index after it, or -1. */
    private static int literal(Line line, int i, int n) {
        String s = line.s;
        int start = i + 1;
        StringBuilder decoded = null;  // only once a backslash is seen
        int j = start;
        while (true) {
            if (j >= n) return -1;
            char c = s.charAt(j);
            if (c == '"') break;
            if (c == '\n' || c == '\r') return -1;
            if (c != '\\') {
                if (decoded != null) decoded.append(c);
                j++;
                continue;
            }
            if (decoded == null) decoded = new StringBuilder(n - start).append(s, start, j);
            j = escape(s, j, n, decoded);
            if (j < 0) return -1;
        }
        line.body = decoded == null ? s.substring(start, j) : decoded.toString();
        j++;
        if (j < n && s.charAt(j) == '@') {
            int k = j + 1;
            int tag = letters(s, k, n, false);
            if (tag == k) return -1;
            while (tag < n && s.charAt(tag) == '-') {
                int sub = letters(s, tag + 1, n, true);
                if (sub == tag + 1) return -1;
                tag = sub;
            }
            line.langStart = k;
            line.langEnd = tag;
            return tag;
        }
        if (s.startsWith("^^", j)) {
            int end = iri(s, j + 2, n);
            if (end < 0) return -1;
            line.datatypeStart = j + 3;
            line.datatypeEnd = end - 1;
            return end;
        }
        return j;
    }

    private static int letters(String s, int i, int n, boolean digits) {
        while (i < n) {
            char c = s.charAt(i);
            if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (digits && c >= '0' && c <= '9'))) break;
            i++;
        }
        return i;
    }

    /**
     * The escape at {@code i} (a backslash) decoded into {@code out}: the index after it, or -1.
     * A {@code \}{@code u} high surrogate must be followed by a {@code \}{@code u} low surrogate, and a
     * low one may not stand alone; {@code \}{@code U} goes up to U+10FFFF, and a surrogate written
     * that way decodes to U+FFFD.
     */
    private static int escape(String s, int i, int n, StringBuilder out) {
        if (i + 1 >= n) return -1;
        char e = s.charAt(i + 1);
        switch (e) {
            case 't': out.append('\t'); return i + 2;
            case 'b': out.append('\b'); return i + 2;
            case 'n': out.append('\n'); return i + 2;
            case 'r': out.append('\r'); return i + 2;
            case 'f': out.append('\f'); return i + 2;
            case '"': case '\'': case '\\': out.append(e); return i + 2;
            case 'u': {
                int unit = hex(s, i + 2, 4, n);
                if (unit < 0) return -1;
                if (unit >= 0xDC00 && unit <= 0xDFFF) return -1;
                if (unit < 0xD800 || unit > 0xDBFF) {
                    out.append((char) unit);
                    return i + 6;
                }
                if (i + 7 >= n || s.charAt(i + 6) != '\\' || s.charAt(i + 7) != 'u') return -1;
                int low = hex(s, i + 8, 4, n);
                if (low < 0xDC00 || low > 0xDFFF) return -1;
                out.append((char) unit).append((char) low);
                return i + 12;
            }
            case 'U': {
                int code = hex(s, i + 2, 8, n);
                if (code < 0 || code > 0x10FFFF) return -1;
                if (code >= 0xD800 && code <= 0xDFFF) {
                    out.append('\uFFFD');
                } else {
                    out.appendCodePoint(code);
                }
                return i + 10;
            }
            default:
                return -1;
        }
    }

    /** {@code digits} hex digits at {@code i} as a number, or -1. */
    private static int hex(String s, int i, int digits, int n) {
        if (i + digits > n) return -1;
        long value = 0;
        for (int k = i; k < i + digits; k++) {
            int d = Character.digit(s.charAt(k), 16);
            if (d < 0 || s.charAt(k) > 'f') return -1;  // Character.digit also takes fullwidth digits
            value = (value << 4) | d;
        }
        return value > Integer.MAX_VALUE ? -1 : (int) value;
    }

    private static boolean isBlankOrComment(String s) {
        int n = s.length();
        int i = skip(s, 0, n, true);
        return i == n || s.charAt(i) == '#';
    }

    // ------------------------------------------------------------ classification

    /**
     * The id in {@code <prefix ID>} spanning [start, end) when ID is {@code first} (one of
     * the letters) then a number without leading zero, and, when {@code lexemePart}, an
     * optional {@code -F<n>} or {@code -S<n>}; else null.
     */
    private static String entityId(String s, int start, int end, String prefix, String first, boolean lexemePart) {
        int i = start + prefix.length();
        if (end - start < prefix.length() + 3 || !s.startsWith(prefix, start) || s.charAt(end - 1) != '>') return null;
        if (first.indexOf(s.charAt(i)) < 0) return null;
        int j = number(s, i + 1, end - 1);
        if (j < 0) return null;
        if (j < end - 1 && lexemePart && s.charAt(j) == '-' && j + 1 < end - 1
                && (s.charAt(j + 1) == 'F' || s.charAt(j + 1) == 'S')) {
            j = number(s, j + 2, end - 1);
            if (j < 0) return null;
        }
        return j == end - 1 ? s.substring(i, end - 1) : null;
    }

    /** The index after a number without leading zero at [i, limit), or -1. */
    private static int number(String s, int i, int limit) {
        if (i >= limit || s.charAt(i) < '1' || s.charAt(i) > '9') return -1;
        i++;
        while (i < limit && s.charAt(i) >= '0' && s.charAt(i) <= '9') i++;
        return i;
    }

    private static boolean containsWithin(String s, int start, int end, String needle) {
        int at = s.indexOf(needle, start);
        return at >= 0 && at + needle.length() <= end;
    }

    private static boolean spans(String s, int start, int end, String constant) {
        return end - start == constant.length() && s.startsWith(constant, start);
    }

    private Row classify(Line line) {
        String s = line.s;
        String subjectId = entityId(s, line.subjectStart, line.subjectEnd, entityPrefix, "QP", false);
        String property = entityId(s, line.predicateStart, line.predicateEnd, directClaimPrefix, "P", false);
        boolean isLiteral = line.body != null;
        String lang = line.langStart < 0 ? null : s.substring(line.langStart, line.langEnd).toLowerCase(Locale.ROOT);
        boolean langKept = lang == null || languages.isEmpty() || languages.contains(lang);
        int os = line.objectStart, oe = line.objectEnd;
        boolean isIri = !isLiteral && s.charAt(os) == '<';

        if (property != null) {
            if (subjectId == null || subjectId.charAt(0) != 'Q') return skip("non_item_subject");
            if (!isLiteral && (!isIri || containsWithin(s, os, oe, "/.well-known/genid/"))) {
                return skip("unknown_value");
            }
            if (!langKept) return skip("other_language");
            return statement(line, subjectId, property, lang, isIri);
        }
        for (int k = 0; k < TERM_PREDICATES.length; k++) {
            if (spans(s, line.predicateStart, line.predicateEnd, TERM_PREDICATES[k])) {
                if (subjectId == null) return skip("term_of_other_subject");
                if (lang == null || !langKept) return skip("other_language");
                return row("term", null, subjectId, null, null, null, line.body, null, lang, null, TERM_KINDS[k], null);
            }
        }
        if (isIri && subjectId != null && subjectId.charAt(0) == 'P'
                && (spans(s, line.predicateStart, line.predicateEnd, propertyTypeIris[0])
                    || spans(s, line.predicateStart, line.predicateEnd, propertyTypeIris[1]))) {
            for (String ns : WIKIBASE_NS) {
                if (s.startsWith(ns, os)) {
                    int nameStart = os + ns.length();
                    int nameEnd = letters(s, nameStart, oe - 1, false);
                    String name = nameEnd == oe - 1 && nameEnd > nameStart ? s.substring(nameStart, nameEnd) : "";
                    return row("property_type", null, subjectId, null, null, null, null, null, null, null, null, name);
                }
            }
        }
        if (isIri && spans(s, line.predicateStart, line.predicateEnd, RDF_TYPE)
                && containsWithin(s, os, oe, "/prop/novalue/P")) {
            return skip("no_value");
        }
        return skip("other_predicate");
    }

    private Row statement(Line line, String subject, String property, String lang, boolean isIri) {
        String s = line.s;
        int os = line.objectStart, oe = line.objectEnd;
        if (line.body == null) {
            String item = isIri ? entityId(s, os, oe, entityPrefix, "Q", false) : null;
            if (item != null) {
                return row("statement", null, subject, property, "item", item, null, null, null, "WikibaseItem", null, null);
            }
            String iri = s.substring(os + 1, oe - 1);
            String entity = entityId(s, os, oe, entityPrefix, "PL", true);
            return row("statement", null, subject, property, "other", null, iri, null, null,
                    inferIriDatatype(iri, entity), null, null);
        }
        String datatype = line.datatypeStart < 0 ? null : s.substring(line.datatypeStart, line.datatypeEnd);
        String objectKind = null, inferred = null;
        if (datatype != null) {
            for (String[] kind : LITERAL_KINDS) {
                if (kind[0].equals(datatype)) {
                    objectKind = kind[1];
                    inferred = kind[2];
                    break;
                }
            }
        }
        if (objectKind == null) {
            if (lang != null) {
                objectKind = "monolingual";
                inferred = "Monolingualtext";
            } else if (datatype == null || datatype.equals(XSD_STRING)) {
                objectKind = "string";
                inferred = "String";
            } else {
                objectKind = "other";
            }
        }
        return row("statement", null, subject, property, objectKind, null, line.body, datatype, lang, inferred, null, null);
    }

    /** The datatype an IRI object (not an item) implies: other entities by id, else by URL shape. */
    private static String inferIriDatatype(String iri, String entity) {
        if (entity != null) {
            if (entity.charAt(0) == 'P') return "WikibaseProperty";
            if (entity.contains("-F")) return "WikibaseForm";
            if (entity.contains("-S")) return "WikibaseSense";
            return "WikibaseLexeme";
        }
        if (iri.contains("/wiki/Special:FilePath/")) return "CommonsMedia";
        if (iri.contains("/data/main/Data:") && iri.endsWith(".map")) return "GeoShape";
        if (iri.contains("/data/main/Data:") && iri.endsWith(".tab")) return "TabularData";
        return "Url";
    }

    // ------------------------------------------------------------ rows

    // rows without a value of the line, made once
    private static final Row REJECT = row("reject", null, null, null, null, null, null, null, null, null, null, null);
    private static final Map<String, Row> SKIPS = new HashMap<>();

    static {
        for (String reason : new String[] {"blank_or_comment", "non_item_subject", "unknown_value", "other_language",
                "term_of_other_subject", "no_value", "other_predicate"}) {
            SKIPS.put(reason, row("skip", reason, null, null, null, null, null, null, null, null, null, null));
        }
    }

    /** The row of a skipped line (one of the reasons above: parse.LINE_OUTCOMES lists them too). */
    private static Row skip(String reason) {
        return SKIPS.get(reason);
    }

    /** One staged row, in the field order of {@code parse.STAGED_FIELDS}. */
    private static Row row(String kind, String reason, String subject, String property, String objectKind,
                           String objectItem, String objectValue, String objectDatatype, String objectLang,
                           String inferredDatatype, String termKind, String declaredDatatype) {
        return RowFactory.create(kind, reason, subject, property, objectKind, objectItem, objectValue,
                objectDatatype, objectLang, inferredDatatype, termKind, declaredDatatype);
    }
}
